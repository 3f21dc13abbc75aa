"""The documentation's numbers and pictures, regenerated from the current code.

Tables (``--tables-only``): reads every ``benchmarks/results/*.json``, keeps those that describe the
current code (below), and rewrites

* ``docs/performance.md`` between ``<!-- numbers:begin -->`` and ``<!-- numbers:end -->`` ("The latest results")
* ``benchmarks/README.md`` between ``<!-- tables:begin -->`` and ``<!-- tables:end -->``

and nothing else in either file. Every number in those regions is a key of a results JSON (or a ratio
of two, said so where it is), and each table names its JSON file, the script that wrote it and the
machine (CPU model, cores, jax version, date, git commit) from the JSON's ``hardware``. A result that
is missing, or that describes older code, gives a line saying which script to run instead of a number.
``benchmarks/results/scaling.png`` (``plot_scaling.py``) is redrawn from the current FK results when
there are any, else left as it is (with a printed note).

Which results count as current:

1. only the result files of :data:`CURRENT_FORMAT` (the scripts written for the current solver and
   their JSON layout); every other file in ``results/`` (``ik_``, ``gpu_``, ``batch_``, ``latency_``
   ...) describes the solver before its rebuild and is left out with a printed note;
2. a file that records the commit it measured (``hardware.git_commit``, written by
   ``_util.hardware_info``; ``robustness.py`` also writes ``git.commit``) counts, and the commit and
   date are printed (with the number of later commits that change ``wuji_jax/``);
3. a file from before the JSONs recorded a commit counts only when it was measured after
   :data:`SOLVER_SINCE` (the commit that set the solver's current defaults); its commit is inferred
   as the last one before its date and marked so. ``--require-commit`` drops such files.

Pictures (``--figures-only``), made with the package's public functions and CLI:

* ``assets/figures/pose_{open,fist,pinch}.png``: ``wuji-jax pose NAME -o ...``;
* ``assets/figures/hand_view.html``: ``wuji-jax view open -o ...``, and ``hand_view.png`` a headless
  chromium screenshot of it with ``thumb_cmc_rot`` selected (as ``tests/test_viewer.py`` runs chromium;
  skipped with a note when chromium is missing);
* ``assets/figures/overlay_sample.mp4`` and ``overlay_strip.png``: one MediaPipe extraction of the
  bundled sample video (``wj.video.extract_landmarks``), ``wj.solve`` (``side="auto"``, as ``wuji-jax
  overlay`` does), ``wj.overlay.render_overlay``: the first 3 s at 0.75 scale, and frames 58, 270 and
  509 at 0.6 scale side by side (each cropped to its left 576 × 432 pixels);
* ``assets/figures/inspire_dexret.png``: ``benchmarks/inspire_channels.py`` on dex-retargeting's
  recording (``../shared/data/dexret_human_joint_right.npy``; skipped with a note when absent).

What was made, with which command, at which commit, goes to ``assets/figures/figures.json``; the
tables step lists the pictures from it in the README's "Numbers" section.

    PYTHONPATH=. python benchmarks/make_docs.py [--tables-only | --figures-only] [--require-commit]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
FIGURES = ROOT / "assets" / "figures"
MANIFEST = FIGURES / "figures.json"
README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"  # its "The latest results" region is written here
INSPIRE_DOC = ROOT / "docs" / "inspire.md"  # holds the hand-written Inspire pose table
BENCH_README = BENCH / "README.md"
DEXRET = ROOT.parent / "shared" / "data" / "dexret_human_joint_right.npy"
SCALING = RESULTS / "scaling.png"

#: result-file name (``<name>_<device>.json``) → the script that writes it
SCRIPTS = {
    "core": "bench_core.py",
    "vs_dexi": "bench_vs_dexi.py",
    "pipeline": "bench_pipeline.py",
    "parquet_rss": "bench_parquet_rss.py",
    "robustness": "robustness.py",
    "robustness-quick": "robustness.py",
    "robustness-partial": "robustness.py",
    "robustness-quick-partial": "robustness.py",
    "ray": "bench_ray.py",
    "fk": "bench_fk.py",
    "fk-float64": "bench_fk.py",
    "vs_dexret": "vs_dex_retargeting.py",
    "ik": "bench_ik.py",
    "ik-quick": "bench_ik.py",
    "batch": "bench_batch.py",
    "gpu": "bench_gpu.py",
    "latency": "bench_latency.py",
    "gradient": "bench_gradient.py",
    "stages": "bench_stages.py",
}
#: the result files written in the current layout by scripts of the current solver; the others in
#: ``results/`` (ik, gpu, batch, latency, and ``-partial`` robustness runs) are left out
CURRENT_FORMAT = ("core", "vs_dexi", "pipeline", "parquet_rss", "robustness", "robustness-quick", "ray", "fk", "vs_dexret",
                  "gpu", "gradient", "stages")
#: results without a recorded commit count only when measured after this commit: "LM keeps the angles within their limits" (defaults: 5 iterations, tolerance 1e-3)
#: (the solver's current defaults, after the core rebuild d6f9a4d)
SOLVER_SINCE = "92f0815"
REBUILD = "d6f9a4d"  # "Solver core rebuilt": results from before it describe the old solver

BEGIN_README, END_README = "<!-- numbers:begin -->", "<!-- numbers:end -->"
BEGIN_BENCH, END_BENCH = "<!-- tables:begin -->", "<!-- tables:end -->"
GENERATED = ("<!-- Written by benchmarks/make_docs.py from benchmarks/results/*.json: "
             "edit that script, not this text; rerun it after a benchmark run. -->")

STRIP_FRAMES = (58, 270, 509)  # the three frames of overlay_strip.png (open hand, fist, fingers raised)
STRIP_SCALE, STRIP_SIZE, STRIP_GAP = 0.6, (576, 432), 6
CLIP_FRAMES, CLIP_SCALE = 90, 0.75  # overlay_sample.mp4: the first 3 s at 30 fps


# ------------------------------------------------------------------------------------------------ git


def _rel(p: Path) -> str:
    """``p`` relative to the repository root where it lies inside it."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def git(*args: str) -> str | None:
    try:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def git_state() -> dict[str, Any]:
    sys.path.insert(0, str(BENCH))
    from _util import git_state as state

    return state()


def commit_date(commit: str) -> dt.datetime | None:
    s = git("log", "-1", "--format=%cI", commit)
    return dt.datetime.fromisoformat(s) if s else None


def later_package_commits(commit: str) -> int | None:
    n = git("rev-list", "--count", f"{commit}..HEAD", "--", "wuji_jax")
    return int(n) if n and n.isdigit() else None


# -------------------------------------------------------------------------------------------- results


@dataclass
class Result:
    """One results JSON: what it is, who wrote it, and whether it describes the current code."""

    path: Path
    name: str  # "core", "vs_dexi", ... (the file name before _<device>)
    device: str  # "cpu", "nvidia-h200", ...
    script: str | None
    data: dict = field(default_factory=dict)
    current: bool = False
    commit: str | None = None
    commit_inferred: bool = False
    dirty: bool | None = None
    date: str | None = None
    why: str = ""
    why_short: str = ""  # the same, for the README

    @property
    def file(self) -> str:
        return f"benchmarks/results/{self.path.name}"

    @property
    def short_why(self) -> str:
        return self.why_short or self.why

    @property
    def hw(self) -> dict:
        return self.data.get("hardware") or {}


def _name_device(path: Path) -> tuple[str, str]:
    stem = path.stem
    return tuple(stem.rsplit("_", 1)) if "_" in stem else (stem, "?")  # type: ignore[return-value]


def _script_of(name: str) -> str | None:
    if name in SCRIPTS:
        return SCRIPTS[name]
    for key in sorted(SCRIPTS, key=len, reverse=True):
        if name.startswith(key + "-"):
            return SCRIPTS[key]
    return None


def classify(path: Path, require_commit: bool) -> Result:
    name, device = _name_device(path)
    r = Result(path, name, device, _script_of(name))
    try:
        r.data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        r.why = f"unreadable ({e})"
        return r
    hw = r.hw
    r.date = hw.get("date") or r.data.get("date")
    commit = hw.get("git_commit") or (r.data.get("git") or {}).get("commit")
    r.dirty = hw.get("git_dirty")
    if r.dirty is None and isinstance(r.data.get("git"), dict):
        mods = r.data["git"].get("package_files_modified_vs_commit")
        r.dirty = bool(mods) if mods is not None else None
    if commit:
        r.commit = commit[:7]
    try:
        when = dt.datetime.fromisoformat(r.date) if r.date else None
    except ValueError:
        when = None
    if name not in CURRENT_FORMAT:
        rebuilt = commit_date(REBUILD)
        r.why = ("a partial run" if name.endswith("partial")
                 else "not a current-format result (make_docs.CURRENT_FORMAT)")
        if when and rebuilt and when < rebuilt:
            r.why += f"; measured before the solver core rebuild ({REBUILD})"
        return r
    if r.commit:
        r.current = True
        return r
    since = commit_date(SOLVER_SINCE)
    if when is None or since is None:
        r.why = "no commit and no readable date recorded"
    elif when < since:
        r.why = f"measured {when:%Y-%m-%d %H:%M} UTC, before {SOLVER_SINCE} (the solver's current defaults)"
        r.why_short = f"measured {when:%Y-%m-%d}, before the solver's current defaults ({SOLVER_SINCE})"
    elif require_commit:
        r.why = "no commit recorded (--require-commit)"
    else:
        r.current = True
        r.commit = (git("rev-list", "-1", f"--before={r.date}", "HEAD") or "")[:7] or None
        r.commit_inferred = True
    return r


def load_results(require_commit: bool) -> list[Result]:
    results = [classify(p, require_commit) for p in sorted(RESULTS.glob("*.json"))]
    print(f"{len(results)} results files in {_rel(RESULTS)}:")
    for r in results:
        who = r.script or "unknown script"
        if r.current:
            later = later_package_commits(r.commit) if r.commit else None
            how = " (inferred from the date: no commit recorded)" if r.commit_inferred else ""
            dirty = ", wuji_jax/ had uncommitted changes" if r.dirty else ""
            since = f"; {later} later commits change wuji_jax/" if later else ""
            print(f"  use  {r.path.name:<28} {who:<22} measured {r.date} at {r.commit}{how}{dirty}{since}")
        else:
            print(f"  skip {r.path.name:<28} {who:<22} {r.date or '?'}: {r.why}")
    return results


class Results:
    """The current results by name, CPU first; and what to say where one is missing."""

    def __init__(self, results: list[Result]):
        self.all = results
        self.missing_keys: list[str] = []
        self.cited: set[Path] = set()  # files whose machine line the region being written has given

    def cite(self, r: Result, extra: str = "") -> str:
        """"From `file` (`script`; machine)" the first time a region names ``r``, shorter after that."""
        if r.path in self.cited:
            return f"From `{r.file}`{extra} (the same run as above):"
        self.cited.add(r.path)
        return f"From {source(r)}{extra}:"

    def of(self, *names: str) -> list[Result]:
        rs = [r for r in self.all if r.current and r.name in names]
        return sorted(rs, key=lambda r: (r.device != "cpu", r.device, names.index(r.name)))

    def absent(self, names: Iterable[str], script: str, args: str = "") -> str:
        names = list(names)
        old = [r for r in self.all if r.name in names and not r.current]
        run = f"`PYTHONPATH=. python benchmarks/{script}{args}`"
        if old:
            files = "; ".join(f"`{r.file}` ({r.short_why})" for r in old)
            return f"*Not measured with the current code yet: run {run}. Left out: {files}.*"
        return f"*Not measured yet (run {run}).*"


# ------------------------------------------------------------------------------------------ formatting

DASH = "—"


def get(res: Result, key: str, book: Results | None = None) -> Any:
    """``res.data`` at the dotted ``key`` (list indices as numbers), None (noted) when absent."""
    node: Any = res.data
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            if book is not None:
                book.missing_keys.append(f"{res.path.name}: {key}")
            return None
    return node


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def f_(x: Any, spec: str) -> str:
    v = _num(x)
    return DASH if v is None else format(v, spec)


def rate(x: Any) -> str:
    return f_(x, ",.0f")


def secs(x: Any) -> str:
    return f_(x, ".1f")


def short(x: Any) -> str:
    """Seconds, or milliseconds below 0.1 s."""
    v = _num(x)
    return secs(v) if v is None or v >= 0.1 else f"{v * 1e3:.1f} ms"


def ms(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def mm(x: Any) -> str:
    return f_(x, ".2f")


def sci(x: Any, digits: int = 2, always: bool = False) -> str:
    v = _num(x)
    if v is None:
        return DASH
    if v == 0:
        return "0"
    e = math.floor(math.log10(abs(v)))
    m = v / 10 ** e
    if round(m, digits - 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.{digits - 1}f} × 10^{e}" if always or abs(e) >= 4 else f"{v:,.{max(digits - 1 - e, 0)}f}"


def pct(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{100 * v:.1f} %"


def count(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{int(v):,}"


def yes(x: Any) -> str:
    return DASH if x is None else ("yes" if x else "no")


def ratio(a: Any, b: Any) -> str:
    va, vb = _num(a), _num(b)
    return DASH if va is None or not vb else f"{va / vb:.2f}×"


def batch_label(n: Any) -> str:
    v = _num(n)
    if v is None:
        return DASH
    v = int(v)
    e = round(math.log10(v)) if v > 0 else 0
    return f"10^{e}" if v >= 10_000 and 10 ** e == v else f"{v:,}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def machine(res: Result) -> str:
    hw = res.hw
    cores = hw.get("cpu_count_usable") or hw.get("cpu_count")
    flags = ", ".join(hw.get("cpu_flags") or [])
    cpu = (hw.get("cpu_model") or "?").replace("(R)", "").replace("(TM)", "").replace(" Processor", "").strip()
    parts = [f"{cpu}, {cores} cores" + (f" ({flags})" if flags else "")]
    if (hw.get("device_kind") or "cpu").lower() != "cpu":
        parts.append(f"{hw.get('device_count', '?')} × {hw['device_kind']}")
    parts.append(f"jax {hw.get('jax') or '?'}")
    parts.append((res.date or "undated")[:10])
    if res.commit:
        later = later_package_commits(res.commit)
        parts.append(f"commit {res.commit}" + (" (inferred from the date)" if res.commit_inferred else "")
                     + (", uncommitted changes" if res.dirty else "")
                     + (f"; {later} later commit{'s' if later > 1 else ''} change{'' if later > 1 else 's'} "
                        "`wuji_jax/`" if later else ""))
    return "; ".join(parts)


def source(res: Result) -> str:
    flag = " --quick" if res.data.get("quick") is True or res.name.endswith("-quick") else ""
    return f"`{res.file}` (`benchmarks/{res.script}{flag}`; {machine(res)})"


# ------------------------------------------------------------------------------------------- sections


def sec_first_answer(book: Results, detail: bool) -> str:
    out = ["**Time to first answer**, each in a fresh process with an empty compilation cache (seconds)."]
    for r in book.of("core"):
        g = lambda k: get(r, "first_answer." + k, book)  # noqa: E731
        out.append(book.cite(r))
        out.append(table(["", "s"], [
            ["`import wuji_jax`", secs(g("import_s"))],
            ["first `wj.solve` (64 frames)", secs(g("first_solve_64_s"))],
            ["first `wj.FrameSolver` frame", secs(g("first_frame_solver_s"))],
            ["`wuji-jax solve` on the bundled sample, empty compilation cache", secs(g("cli_cold_s"))],
            ["the same, second run (cache filled)", secs(g("cli_warm_s"))],
            ["first gradient through `wj.solve` (`jax.jit(jax.value_and_grad(...))`, one frame)",
             secs(g("first_gradient_s"))],
            ["`wuji-jax pose pinch` (a PNG of a named pose), no compilation cache", secs(g("cli_pose_s"))],
        ]))
        calls = g("first_second_call_s") or {}
        names = {"solve_optax": "`wj.solve_optax` (8 frames, default optimizer, 300 steps)",
                 "landmark_loss": "`wj.landmark_loss` (8 frames)",
                 "calibrate": "`wj.calibrate` (default settings, the recording)",
                 "draw_hand": "`wj.viz.draw_hand` (a PNG)"}
        if calls:
            out.append("Other entry points, first and second call in one fresh process (seconds; the first "
                       "compiles, later calls with the same shapes reuse the program; `wj.solve_optax` starts from "
                       "`wj.solve` and `wj.calibrate` solves in each of its rounds):")
            out.append(table(["", "first call", "second call"],
                             [[names.get(k, f"`{k}`"), secs(v[0]), short(v[1])] for k, v in calls.items()]))
    if len(out) == 1:
        out.append(book.absent(["core"], "bench_core.py"))
    return "\n\n".join(out)


RECORDING_NAMES = {"dexret_human_joint_right": "dex-retargeting's recording", "bundled_sample": "the bundled sample"}


def sec_accuracy(book: Results, detail: bool) -> str:
    out = ["**Accuracy at the default settings**, of the uncalibrated model unless said (lengths in mm)."]
    for r in book.of("core"):
        out.append(book.cite(r))
        rows = []
        for i, a in enumerate(get(r, "accuracy", book) or []):
            g = lambda k: get(r, f"accuracy.{i}.{k}", book)  # noqa: E731
            name = RECORDING_NAMES.get(a.get("recording"), f"`{a.get('recording')}`")
            row = [f"{name} ({count(g('frames'))} frames)",
                   f"{mm(g('residual_median_mm'))} / {mm(g('residual_p95_mm'))} / {mm(g('residual_max_mm'))}",
                   count(g("frames_above_15mm")), mm(g("keypoint_error_median_mm")),
                   mm(g("keypoint_error_median_calibrated_mm")),
                   f"{f_(g('fist_thumb_rotation_mean'), '.2f')} / {f_(g('fist_thumb_rotation_max'), '.2f')}"]
            if detail:
                row += [pct(g("converged_fraction")),
                        f"{f_(g('iterations_mean'), '.1f')} / {count(g('iterations_max'))}"]
            rows.append(row)
        head = ["recording", "RMS residual per frame p50 / p95 / max", "frames > 15 mm",
                "keypoint error, median", "after `wj.calibrate`", "fist frames' Inspire thumb rotation, mean / max"]
        if detail:
            head += ["converged", "LM iterations mean / max"]
        out.append(table(head, rows))
        rt = lambda k: get(r, "round_trip." + k, book)  # noqa: E731
        h = lambda k: get(r, "hostile." + k, book)  # noqa: E731
        out.append(table(["check", "result"], [
            [f"noise-free synthetic round trip ({count(rt('frames'))} frames: random angles, rotation, "
             "translation, scale 0.8–1.2): joint error median / p99",
             f"{sci(rt('joint_error_median_deg'), always=True)}° / {sci(rt('joint_error_p99_deg'), always=True)}°"],
            ["the same: RMS residual p99 / frames converged",
             f"{sci(rt('residual_p99_mm'), always=True)} mm / {pct(rt('converged_fraction'))}"],
            [f"hostile frames ({count(h('frames'))}: random, degenerate, huge, tiny, NaN-laced): every output "
             "finite / every angle within the limits", f"{yes(h('all_finite'))} / {yes(h('within_limits'))}"],
            ["the same: flagged / non-finite reported valid",
             f"{count(h('flagged'))} / {count(h('non_finite_reported_valid'))}"],
        ]))
    if len(out) == 1:
        out.append(book.absent(["core"], "bench_core.py"))
    return "\n\n".join(out)


def sec_speed(book: Results, detail: bool) -> str:
    out = ["**Speed** at the default settings (warm, median of repeats)."]
    for r in book.of("core"):
        g = lambda k: get(r, "speed." + k, book)  # noqa: E731
        out.append(book.cite(r))
        out.append(table(["", "frames/s", "ms"], [
            [f"`wj.solve` + `wj.inspire.to_inspire`, batch {count(g('batch'))}, {count(g('devices'))} devices",
             rate(g("solve_inspire_frames_per_s")), DASH],
            ["one warm frame through `wj.FrameSolver`, median / p90", DASH,
             f"{ms(g('frame_solver_median_ms'))} / {ms(g('frame_solver_p90_ms'))}"],
        ]))
    if len(out) == 1:
        out.append(book.absent(["core"], "bench_core.py"))
    return "\n\n".join(out)


CHANNELS = ("little", "ring", "middle", "fore", "thumb_bend", "thumb_rotation")


def sec_vs_dexi(book: Results, detail: bool) -> str:
    out = ["**Side by side with dexi-rs**, the Rust port of dex-retargeting: Inspire commands from the same "
           "landmarks, on the same machine, in one run."]
    for r in book.of("vs_dexi"):
        d = lambda k: get(r, "dexi_rs." + k, book)  # noqa: E731
        w = lambda k: get(r, "wuji_jax." + k, book)  # noqa: E731
        out.append(book.cite(r, f", on `{get(r, 'data.file')}` ({count(get(r, 'data.frames'))} frames)"))
        rows = [["dexi-rs, one frame a call, one core", rate(d("per_core_frames_per_s")),
                 f"{ms(d('median_frame_ms'))} / {ms(d('p90_frame_ms'))}", DASH],
                [f"dexi-rs per machine (× {count(d('usable_cores'))} cores, independent streams: an upper bound)",
                 rate(d("per_machine_frames_per_s")), DASH, "1.00×"]]
        for i, _ in enumerate(w("batches") or []):
            b = lambda k: get(r, f"wuji_jax.batches.{i}.{k}", book)  # noqa: E731
            rows.append([f"wuji_jax `wj.solve` + `to_inspire`, batch {count(b('batch'))}, "
                         f"{count(w('cpu_devices'))} CPU devices", rate(b("frames_per_s")), DASH,
                         f_(b("ratio_to_dexi_machine"), ".2f") + "×"])
        rows.append(["wuji_jax `wj.FrameSolver`, one frame a call", DASH,
                     f"{ms(w('frame_solver.median_ms'))} / {ms(w('frame_solver.p90_ms'))}", DASH])
        rows.append(["the same, warm-started from the previous frame", DASH,
                     f"{ms(w('frame_solver.warm_median_ms'))} / {ms(w('frame_solver.warm_p90_ms'))}", DASH])
        out.append(table(["", "frames/s", "ms per frame, median / p90", "÷ dexi-rs per machine"], rows))
        out.append(f"One frame a call, `FrameSolver` takes {ratio(w('frame_solver.median_ms'), d('median_frame_ms'))} "
                   "dexi-rs's median time per frame (the ratio of the two medians above). Agreement of the six "
                   f"channels over the recording: mean correlation of the four fingers "
                   f"{f_(get(r, 'mean_finger_correlation', book), '.3f')}.")
        if detail:
            rows = []
            for i, _ in enumerate(get(r, "agreement", book) or []):
                a = lambda k: get(r, f"agreement.{i}.{k}", book)  # noqa: E731
                rows.append([f"{a('channel')}" + ("" if a("comparable") else " (thumb: different models)"),
                             f_(a("correlation"), ".3f"), f_(a("mean_abs_difference"), ".3f")])
            out.append(table(["channel", "Pearson r over time", "mean abs. difference"], rows))
    if len(out) == 1:
        out.append(book.absent(["vs_dexi"], "bench_vs_dexi.py", " --quick"))
    return "\n\n".join(out)


def sec_pipeline(book: Results, detail: bool) -> str:
    out = ["**The dataset pipeline**: `wuji-jax solve big.npy -o out.parquet` as a whole process (start-up, "
           "compilation or cache load, reading, solving, writing, plot, summary) against `wj.solve` + "
           "`to_inspire` alone on the same frames."]
    for r in book.of("pipeline"):
        g = lambda k: get(r, k, book)  # noqa: E731
        warm = g("cli_warm_runs") or []
        out.append(book.cite(r, f", {count(g('frames'))} frames"))
        out.append(table(["", "wall s", "frames/s", "peak RSS MiB"], [
            ["`wuji-jax solve`, fresh process, empty compilation cache", secs(g("cli_cold.wall_s")),
             rate(g("cli_cold.frames_per_s")), f_(g("cli_cold.peak_rss_mib"), ",.0f")],
            [f"`wuji-jax solve`, fresh process, cache filled (median of {len(warm)})",
             secs(g("cli_warm_wall_s_median")), rate(g("cli_warm_frames_per_s")),
             f_(g("cli_warm_peak_rss_mib"), ",.0f")],
            [f"`wj.solve` + `to_inspire` alone, warm, batch {count(g('solver_alone.batch'))}",
             secs(g("solver_alone.median_s")), rate(g("solver_alone.frames_per_s")), DASH],
        ]))
        out.append(f"The whole process runs at {f_(g('cli_warm_over_solver_alone'), '.2f')}× the solver alone's "
                   "frames/s (warm cache).")
    if len(out) == 1:
        out.append(book.absent(["pipeline"], "bench_pipeline.py"))
    return "\n\n".join(out)


def sec_parquet_rss(book: Results, detail: bool) -> str:
    out = ["**Reading a big Parquet file**: `wuji_jax.data.io.iter_chunks` streams a landmark table (the chunks "
           "`wuji-jax solve` reads) in a fresh process; peak RSS of that process."]
    for r in book.of("parquet_rss"):
        g = lambda k: get(r, f"result.{k}", book)  # noqa: E731
        out.append(book.cite(r))
        out.append(table(["file", "frames", "row groups × columns", "read s", "RSS after import MiB",
                          "peak RSS MiB (MB)", "target MB"], [[
            f"{f_(g('file_mib'), ',.0f')} MiB", count(g("frames")),
            f"{g('row_groups')} × {g('columns')}", secs(g("seconds")), f_(g("rss_after_import_mib"), ",.0f"),
            f"{f_(g('peak_rss_mib'), ',.0f')} ({f_(g('peak_rss_mb'), ',.0f')})", f_(g("target_mb"), ",.0f")]]))
        out.append(f"Reader: {g('reader')}.")
    if len(out) == 1:
        out.append(book.absent(["parquet_rss"], "bench_parquet_rss.py"))
    return "\n\n".join(out)


def sec_gradient(book: Results, detail: bool) -> str:
    out = ["**Gradients through the solver**: `jax.jit(jax.value_and_grad(loss))` with `loss` = Σ sin of "
           "`wj.solve`'s angles (float32, default settings), each batch in a fresh process without the "
           "compilation cache: the time to compile, then the median warm call; the forward program alone "
           "beside it."]
    for r in book.of("gradient"):
        out.append(book.cite(r))
        rows = []
        for run in get(r, "runs", book) or []:
            g, f = run.get("gradient", {}), run.get("forward", {})
            rows.append([count(run.get("batch")), secs(g.get("compile_s")), f_(g.get("us_per_frame"), ",.1f"),
                         f_(g.get("run_ms"), ",.2f"), secs(f.get("compile_s")), f_(f.get("us_per_frame"), ",.1f")])
        out.append(table(["frames", "gradient: compile s", "µs a frame", "ms a call", "forward: compile s",
                          "µs a frame"], rows))
    if len(out) == 1:
        out.append(book.absent(["gradient"], "bench_gradient.py"))
    return "\n\n".join(out)


def sec_stages(book: Results, detail: bool) -> str:
    out = ["**Where the time goes**: the solver's stages at the default settings on one CPU device, µs per "
           "frame of a batch (the fit's rows at most 0, 1, … LM iterations: one iteration is the step between "
           "two rows, taken between the fastest repeats), and the kernels XLA runs for one `FrameSolver` frame."]
    for r in book.of("stages"):
        b = lambda k: get(r, "batch." + k, book)  # noqa: E731
        f = lambda k: get(r, "frame_solver." + k, book)  # noqa: E731
        out.append(book.cite(r, f", on `{get(r, 'data')}` ({count(b('frames'))} frames, chunks of "
                                f"{count(b('chunk_frames'))})"))
        rows = [["closed-form start (`start_chunked`)", f_(b("start_us_per_frame"), ".2f"),
                 f_(b("start_us_per_frame_min"), ".2f")]]
        for fit in b("fit") or []:
            k = fit.get("iterations")
            rows.append([f"fit (`fit_chunked`), at most {k} LM iteration{'' if k == 1 else 's'}",
                         f_(fit.get("us_per_frame"), ".2f"), f_(fit.get("us_per_frame_min"), ".2f")])
        rows.append(["one LM iteration", f_(b("lm_iteration_us_per_frame_median"), ".2f"), DASH])
        out.append(table(["stage", "µs a frame, median", "fastest"], rows))
        hist = b("iterations_histogram") or []
        out.append(f"Iterations per frame at the defaults: {', '.join(f'{n:,} frames {i}' for i, n in enumerate(hist) if n)}. "
                   f"One warm `FrameSolver` frame: {ms(f('median_ms'))} ms, {count(f('kernels_in_program'))} kernels "
                   f"in its program, {count(round(f('kernels_executed_per_frame') or 0))} executed a frame "
                   f"({f_(f('us_per_executed_kernel'), '.3f')} µs each).")
    if len(out) == 1:
        out.append(book.absent(["stages"], "bench_stages.py"))
    return "\n\n".join(out)


def sec_robustness(book: Results, detail: bool) -> str:
    out = ["**Robustness**: hostile frames through `wj.solve`, malformed files through the CLI."]
    for r in book.of("robustness", "robustness-quick"):
        g = lambda k: get(r, k, book)  # noqa: E731
        out.append(book.cite(r))
        rows = []
        if g("solver") is not None:
            c = lambda k: get(r, "solver.checks_must_be_0." + k, book)  # noqa: E731
            rows += [
                ["hostile frames through `wj.solve` (defaults, `check_units=False`)", count(g("solver.frames"))],
                ["valid frames with a non-finite output (must be 0)", count(c("frames_nonfinite_output_but_valid"))],
                ["valid frames with an angle outside the limits (must be 0)",
                 count(c("frames_valid_with_angles_outside_limits"))],
                ["valid frames of kinds that cannot hold a hand (must be 0)",
                 count(c("frames_valid_of_kinds_that_must_be_invalid"))],
                ["frames with any non-finite output, valid or not / flagged / valid",
                 f"{count(g('solver.frames_with_nonfinite_output'))} / {count(g('solver.flagged'))} / "
                 f"{count(g('solver.valid'))}"],
                [f"`check_units=True` on {count(g('solver.mixed_into_real_check_units.frames'))} real frames with 5 % "
                 "hostile: outcome, pass", f"{g('solver.mixed_into_real_check_units.outcome') or DASH}, "
                 f"{yes(g('solver.mixed_into_real_check_units.pass'))}"],
            ]
        if g("cli_files") is not None:
            rows.append(["malformed files through `wuji-jax solve`: cases / pass / fail",
                         " / ".join(count(g("cli_files." + k)) for k in ("cases", "pass", "fail"))])
        rows.append(["every check passes", yes(g("pass"))])
        out.append(table(["check", "result"], rows))
        if detail and g("solver.kinds"):
            rows = []
            for kind, v in g("solver.kinds").items():
                rows.append([f"`{kind}`", count(v.get("frames")), count(v.get("valid")), count(v.get("flagged")),
                             count(v.get("nonfinite_and_valid")), count(v.get("outside_limits_and_valid"))])
            out.append(table(["kind", "frames", "valid", "flagged", "non-finite & valid", "outside limits & valid"],
                             rows))
        if detail and g("solver.flag_counts"):
            out.append("Flags: " + ", ".join(f"`{k}` {count(v)}" for k, v in g("solver.flag_counts").items()) + ".")
        if detail:
            bad = [x for x in g("cli_files.results") or [] if x.get("verdict") != "PASS"]
            if bad:
                out.append("Failed cases: " + "; ".join(f"`{x.get('case')}` ({x.get('why')})" for x in bad) + ".")
    if len(out) == 1:
        out.append(book.absent(["robustness", "robustness-quick"], "robustness.py", " --quick"))
    return "\n\n".join(out)


def _scalars(node: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("hardware", "versions", "config", "notes", "git"):
                continue
            yield from _scalars(v, f"{prefix}{k}.")
    elif isinstance(node, (int, float, bool)) or (isinstance(node, str) and len(node) < 60):
        yield prefix[:-1], node


def _median_wall(runs: list) -> float | None:
    """The median ``wall_s`` of a configuration's runs (the rounds its frames/s is the median of)."""
    walls = [r["wall_s"] for r in runs if isinstance(r.get("wall_s"), (int, float))]
    return statistics.median(walls) if walls else None


def sec_ray(book: Results, detail: bool) -> str:
    out = ["**Ray** (`benchmarks/bench_ray.py`): `solve_dataset_ray` on a local cluster of this machine against "
           "the single-process `wuji-jax solve` on the same frames, each a fresh process from start-up to "
           "summary (warm compilation cache, Parquet out, no plot)."]
    for r in book.of("ray"):
        g = lambda k: get(r, k, book)  # noqa: E731
        cli = g("cli") or {}
        cli_runs = cli.get("runs") or [{}]
        out.append(book.cite(r, f", {count(g('frames'))} frames"))
        rows = [["`wuji-jax solve` (one process, a CPU device per core)", DASH, secs(_median_wall(cli_runs)),
                 rate(cli.get("frames_per_s")), DASH, DASH]]
        same = g("ray_vs_cli_table") or {}
        for x in g("ray") or []:
            runs = x.get("runs") or [{}]
            label = x.get("layout", x.get("workers"))
            eq = same.get(str(label), {}) if isinstance(same, dict) else {}
            name = {"default": "default layout", "running": "default layout, the first job on a cluster already "
                    "running (`--ray auto`; its start not timed)",
                    "running-again": "default layout, a later job on that cluster"}.get(str(label))
            if name is None and str(label).startswith("running-again-"):
                name = f"layout {str(label).removeprefix('running-again-')}, a later job on that cluster"
            name = name or f"layout {label}"
            rows.append([f"Ray, {name}",
                         f"{x.get('workers')} × {x.get('cpus_per_worker') or 1}", secs(_median_wall(runs)),
                         rate(x.get("frames_per_s")), f"{100 * x['overhead_vs_cli']:+.1f} %"
                         if isinstance(x.get("overhead_vs_cli"), (int, float)) else DASH,
                         yes(eq.get("bitwise_equal")) if "bitwise_equal" in eq else DASH])
        out.append(table(["run", "workers × CPUs", "wall s (median)", "frames/s", "overhead vs the CLI",
                          "table bit-identical to the CLI's"], rows))
    if len(out) == 1:
        return ""  # no ray results: the section is left out
    return "\n\n".join(out)


def sec_gpu(book: Results, detail: bool) -> str:
    """The accelerator run (``bench_gpu.py``): accuracy there, the kernel's frames/s per chunk size, the
    public call, the CLI; with ``detail`` the public call's parts and the profile's top kernels."""
    out = ["**On a GPU** (`benchmarks/bench_gpu.py`, default settings, float32): batch 2^20 frames."]
    for r in book.of("gpu"):
        g = lambda k: get(r, k, book)  # noqa: E731
        out.append(book.cite(r))
        acc = [a for a in g("accuracy") or [] if a]
        out.append(table(["recording", "residual p95 / max mm", "keypoint median mm", "largest angle difference "
                          "from the CPU's °"],
                         [[a["recording"], f"{mm(a.get('residual_p95_mm'))} / {mm(a.get('residual_max_mm'))}",
                           mm(a.get("keypoint_error_median_mm")), f_(a.get("vs_cpu_angle_diff_max_deg"), ".4f")]
                          for a in acc]))
        rows = [[f"solver kernel (inputs on the device), chunks of {count(v['chunk'])}", rate(v.get("frames_per_s")),
                 secs(v.get("compile_and_first_s"))] for v in g("variants") or []]
        rows += [[f"`wj.solve` + `to_inspire` on numpy, {p['data']}", rate(p.get("solve_inspire_frames_per_s")),
                  secs(p.get("first_call_s"))] for p in g("public") or [] if p]
        rows += [[f"`wuji-jax solve` {c['cache']} compilation cache (fresh process, {count(g('variants.0.frames'))} "
                  "frames .npy → parquet)", rate(c.get("frames_per_s")), secs(c.get("wall_s"))]
                 for c in g("cli") or []]
        out.append(table(["", "frames/s", "first call (compile) / wall s"], rows))
        rt = g("round_trip") or {}
        out.append(f"Noise-free round trip ({count(rt.get('frames'))} frames): joint error median "
                   f"{sci(rt.get('joint_error_median_deg'))} °, p99 {sci(rt.get('joint_error_p99_deg'))} °, "
                   f"converged {pct(rt.get('converged_fraction'))}. FK: {sci(g('fk.sets_per_s'))} keypoint sets/s.")
        chk = r.data.get("check_after_summing")
        if chk:
            out.append(f"A later check in a fresh process (commit {chk['commit']}: the solver's sums as XLA reductions "
                       f"on accelerators, `wuji_jax.hand.geometry.summing`): first `wj.solve` (621 frames) "
                       f"{secs(chk.get('first_solve_621_s'))} s; solver kernel {rate(chk.get('kernel_frames_per_s'))} "
                       f"frames/s, compiled in {secs(chk.get('kernel_compile_and_first_s'))} s; `wj.solve` + "
                       f"`to_inspire` on numpy {rate(chk.get('public_solve_inspire_frames_per_s'))} frames/s; residual "
                       f"p95 / max {mm(chk.get('residual_p95_mm'))} / {mm(chk.get('residual_max_mm'))} mm, angles within "
                       f"{f_(chk.get('vs_cpu_angle_diff_max_deg'), '.3f')} ° of the CPU's; `FrameSolver` (on the host's "
                       f"CPU) first frame {secs(chk.get('frame_solver_first_s'))} s, warm median "
                       f"{ms(chk.get('frame_solver_median_ms'))} ms.")
        parts = r.data.get("parts")
        if detail and parts:
            out.append("Where `wj.solve`'s time goes on numpy input (s, warm medians): input checks on the host "
                       f"{f_(parts.get('check_input_s'), '.3f')}, the transfer to the device "
                       f"{f_(parts.get('device_put_s'), '.3f')}, the chunks solved a call each "
                       f"{f_(parts.get('chunk_calls_device_input_s'), '.3f')} against "
                       f"{f_(parts.get('one_program_s'), '.3f')} for all chunks in one program; whole call "
                       f"{f_(parts.get('solve_numpy_s'), '.3f')}.")
        fs = r.data.get("frame_solver")
        if fs:
            out.append(f"`wj.FrameSolver` (it runs on the host's CPU): first frame {secs(fs.get('first_frame_s'))} s, "
                       f"warm median {ms(fs.get('median_ms'))} ms.")
        prof = r.data.get("profile_summary")
        if detail and prof:
            out.append(f"Profile ({prof['what']}; commit {prof['commit']}): {count(prof['kernel_launches'])} kernel "
                       f"launches, {prof['kernels_per_iteration']} per LM iteration, GPU busy {prof['gpu_busy_ms']} "
                       f"of {prof['span_ms']} ms. The largest kernels:")
            out.append(table(["kernel", "µs per launch", "share", "launch", "source lines"],
                             [[k["kernel"], f_(k["us_per_launch"], ".1f"), k["share"], k.get("launch") or DASH,
                               ", ".join(k["source"])] for k in prof["top_kernels"][:8]], "lrrll"))
    if len(out) == 1:
        return ""  # no accelerator run: the section is left out
    return "\n\n".join(out)


def sec_fk(book: Results, detail: bool) -> str:
    out = ["**Forward kinematics**: `wj.forward_keypoints` throughput (keypoint sets/s)."]
    for r in book.of("fk"):
        rows_in = get(r, "results", book) or []
        out.append(book.cite(r, f", {get(r, 'dtype') or 'float32'}"))
        pick = rows_in if detail else [x for x in rows_in if x.get("batch") in (1, 10**5)] + (
            [rows_in[-1]] if rows_in and rows_in[-1].get("batch") not in (1, 10**5) else [])
        rows = [[batch_label(x.get("batch")), secs(x.get("first_call_s")), ms(_mul(x.get("median_s"), 1e3)),
                 sci(x.get("sets_per_s"))] for x in pick]
        out.append(table(["batch", "first call s", "warm median ms", "keypoint sets/s"], rows))
    if len(out) == 1:
        out.append(book.absent(["fk"], "bench_fk.py"))
    return "\n\n".join(out)


def _mul(x: Any, k: float) -> float | None:
    v = _num(x)
    return None if v is None else v * k


def sec_vs_dexret(book: Results, detail: bool) -> str:
    out = ["**Side by side with dex-retargeting**, in Python (vector retargeting, Inspire hand): the same "
           "recording, on the same machine."]
    for r in book.of("vs_dexret"):
        d = lambda k: get(r, "dex_retargeting." + k, book)  # noqa: E731
        w = lambda k: get(r, "wuji_jax." + k, book)  # noqa: E731
        out.append(book.cite(r, f", on `{get(r, 'data.file')}` ({count(get(r, 'data.frames'))} frames)"))
        out.append(table(["", "frames/s", "ms per frame, median"], [
            ["dex-retargeting, one frame a call", rate(d("frames_per_s")), ms(d("median_frame_ms"))],
            ["wuji_jax, all frames in one batch", rate(w("batch_frames_per_s")), DASH],
            ["wuji_jax, one frame a call (public calls)", rate(w("per_frame_frames_per_s")),
             ms(w("per_frame_median_ms"))],
            ["wuji_jax, one frame a call under `jax.jit`", rate(w("per_frame_jit_frames_per_s")),
             ms(w("per_frame_jit_median_ms"))],
        ]))
        corr = f_(get(r, "mean_finger_correlation", book), ".3f")
        out.append(f"Mean correlation of the four finger channels: {corr}.")
    if len(out) == 1:
        out.append(book.absent(["vs_dexret"], "vs_dex_retargeting.py"))
    return "\n\n".join(out)


def sec_status(book: Results) -> str:
    rows = []
    for r in book.all:
        state = ("current" + (f", commit {r.commit}" if r.commit else "")
                 + (" (inferred from the date)" if r.commit_inferred else "")) if r.current else f"left out: {r.why}"
        rows.append([f"`{r.path.name}`", f"`{r.script}`" if r.script else "?", (r.date or DASH)[:10], state])
    return ("**Results files**: which of them the tables above use (`make_docs.py` decides: "
            "current-format files that record their commit, or were measured after the solver's current "
            f"defaults, {SOLVER_SINCE}):\n\n" + table(["file", "written by", "measured", "status"], rows, "llll"))


def sec_pictures(scaling_current: bool) -> str:
    try:
        man = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        man = None
    out = ["**Pictures.**"]
    if man is None:
        out.append("*Not regenerated yet: run `PYTHONPATH=. python benchmarks/make_docs.py --figures-only`.*")
    else:
        at = f"commit {man.get('git_commit')}" + (", uncommitted changes" if man.get("git_dirty") else "")
        out.append(f"Regenerated by `benchmarks/make_docs.py` on {str(man.get('date'))[:10]} at {at} "
                   "(list: `assets/figures/figures.json`):")
        lines = []
        for f in man.get("figures", []):
            if f.get("made"):
                fit = ""
                if f.get("residual_median_mm") is not None:
                    fit = (f" ({count(f.get('frames_with_hand'))} of {count(f.get('frames'))} frames with a hand, "
                           f"median fit residual {mm(f['residual_median_mm'])} mm)")
                lines.append(f"- [`{f['file']}`]({f['file']}): {f['what']}{fit}; made by {f['made_by']}.")
            else:
                lines.append(f"- `{f['file']}`: not regenerated ({f.get('why')}).")
        out.append("\n".join(lines))
    if scaling_current:
        out.append("![FK throughput over batch size per device](benchmarks/results/scaling.png)\n\n"
                   "*`benchmarks/results/scaling.png`: FK throughput of the current results files, drawn by "
                   "`benchmarks/plot_scaling.py` (run by `make_docs.py`).*")
    else:
        out.append("`benchmarks/results/scaling.png` (`benchmarks/plot_scaling.py`) is drawn from FK/IK results of "
                   "the solver before its rebuild and is not shown; `make_docs.py` redraws it once "
                   "`benchmarks/bench_fk.py` has run on the current code.")
    return "\n\n".join(out)


def readme_region(book: Results, scaling_current: bool) -> str:
    book.cited = set()
    parts = [
        GENERATED,
        "Every figure below comes from benchmarks/results/*.json via benchmarks/make_docs.py: after a benchmark "
        "run, `PYTHONPATH=. python benchmarks/make_docs.py --tables-only` rewrites this section and the tables of "
        "`benchmarks/README.md` (more detail, and which results files are used). A result of older code is left "
        "out, and its rows name the script to run. float32; speeds are warm medians of repeats.",
        sec_first_answer(book, False), sec_accuracy(book, False), sec_speed(book, False),
        sec_vs_dexi(book, False), sec_pipeline(book, False), sec_robustness(book, False), sec_ray(book, False),
        sec_gpu(book, False), sec_fk(book, False), sec_vs_dexret(book, False), sec_pictures(scaling_current),
    ]
    return "\n\n".join(p for p in parts if p)


def bench_region(book: Results) -> str:
    def h(body: str) -> str:
        """The section's bold lead ("**Title**, more.") as a heading ("### Title", "More.")."""
        m = re.match(r"\*\*(.+?)\*\*[ ,:.]*", body)
        if not m:
            return body
        rest = body[m.end():]
        return f"### {m.group(1)}\n\n" + (rest[:1].upper() + rest[1:] if rest[:1].isalpha() else rest)

    book.cited = set()
    parts = [
        GENERATED,
        "## Results of the current code\n\nWritten by `benchmarks/make_docs.py` from `results/*.json` (each table "
        "names its file, script and machine); the same figures, shorter, are the README's \"Numbers\". After a "
        "benchmark run: `PYTHONPATH=. python benchmarks/make_docs.py --tables-only`.",
        h(sec_first_answer(book, True)), h(sec_accuracy(book, True)), h(sec_speed(book, True)),
        h(sec_stages(book, True)), h(sec_gradient(book, True)), h(sec_vs_dexi(book, True)), h(sec_pipeline(book, True)),
        h(sec_parquet_rss(book, True)), h(sec_robustness(book, True)),
        h(sec_ray(book, True)), h(sec_gpu(book, True)), h(sec_fk(book, True)), h(sec_vs_dexret(book, True)), h(sec_status(book)),
    ]
    return "\n\n".join(p for p in parts if p)


def replace_region(path: Path, begin: str, end: str, body: str) -> bool:
    text = path.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{_rel(path)}: the markers {begin} ... {end} are missing; add them around "
                         "the region make_docs.py owns")
    new = text[:i + len(begin)] + "\n" + body.rstrip() + "\n" + text[j:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def redraw_scaling(book: Results) -> bool:
    """``plot_scaling.py`` over the current FK results only (its other inputs, ik_/gpu_, are older code)."""
    fk = book.of("fk", "fk-float64")
    if not fk:
        print(f"note: {_rel(SCALING)} left as it is: plot_scaling.py's inputs (fk_, ik_, gpu_ results) "
              "describe older code; run benchmarks/bench_fk.py")
        return False
    sys.path.insert(0, str(BENCH))
    import plot_scaling

    with tempfile.TemporaryDirectory(prefix="wuji_make_docs_") as tmp:
        for r in fk:
            shutil.copy(r.path, Path(tmp) / r.path.name)
        plot_scaling.main(["--results", tmp, "--out", str(SCALING)])
    return True


def tables(require_commit: bool) -> None:
    book = Results(load_results(require_commit))
    scaling_current = redraw_scaling(book)
    # the region's links are written from the repository root; docs/performance.md sits one folder down
    region = readme_region(book, scaling_current).replace("](assets/", "](../assets/").replace("](benchmarks/", "](../benchmarks/")
    changed = replace_region(PERFORMANCE, BEGIN_README, END_README, region)
    print(f"{_rel(PERFORMANCE)}: numbers region {'rewritten' if changed else 'unchanged'}")
    changed = replace_region(BENCH_README, BEGIN_BENCH, END_BENCH, bench_region(book))
    print(f"{_rel(BENCH_README)}: tables region {'rewritten' if changed else 'unchanged'}")
    for k in dict.fromkeys(book.missing_keys):
        print(f"warning: key missing, shown as {DASH}: {k}")


# ------------------------------------------------------------------------------------------- pictures


def _cli(*args: str) -> str:
    """``wuji-jax ARGS`` in a child process (``python -m wuji_jax``) from the repository root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "wuji_jax", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"wuji-jax {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout




def fig_poses() -> list[dict]:
    out = []
    for name in ("open", "fist", "pinch"):
        path = FIGURES / f"pose_{name}.png"
        _cli("pose", name, "-o", _rel(path))
        out.append(dict(file=_rel(path), made=True, made_by=f"`wuji-jax pose {name} -o {_rel(path)}`",
                        what=f"the right hand at the named pose '{name}' in three orthographic views"))
        print(f"  {_rel(path)}")
    return out


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def fig_viewer() -> list[dict]:
    html = FIGURES / "hand_view.html"
    _cli("view", "open", "-o", _rel(html))
    out = [dict(file=_rel(html), made=True, made_by=f"`wuji-jax view open -o {_rel(html)}`",
                what="the interactive viewer's page, right hand at the open pose")]
    print(f"  {_rel(html)}")
    png = FIGURES / "hand_view.png"
    exe = _chromium()
    entry = dict(file=_rel(png), what="the viewer in headless chromium, thumb_cmc_rot selected (1000 × 700)")
    if exe is None:
        print(f"  note: {_rel(png)} left as it is: chromium is not installed (apt-get install chromium)")
        return out + [dict(entry, made=False, why="chromium not installed")]
    with tempfile.TemporaryDirectory(prefix="wuji-chromium-") as profile:
        shot = Path(profile) / "shot.png"
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
               f"--screenshot={shot}", "--window-size=1000,700", html.resolve().as_uri() + "#select=thumb_cmc_rot"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0 or not shot.exists():
            raise RuntimeError(f"chromium screenshot failed ({p.returncode}): {p.stderr[-2000:]}")
        shutil.copy(shot, png)
    print(f"  {_rel(png)}")
    return out + [dict(entry, made=True, made_by="`benchmarks/make_docs.py`: headless chromium "
                       "`--screenshot --window-size=1000,700` of hand_view.html#select=thumb_cmc_rot")]


def fig_overlay() -> list[dict]:
    import cv2
    import numpy as np

    import wuji_jax as wj
    from wuji_jax.hand.model import asset_path
    from wuji_jax.viz.overlay import render_overlay
    from wuji_jax.data.video import extract_landmarks

    video = asset_path("samples", "human_hand_video.mp4")
    rec = extract_landmarks(video, progress=False)
    res = wj.solve(wj.load_hand("right"), rec.world, side="auto")
    detected = np.asarray(rec.detected, bool)
    residual = np.asarray(res.residual, np.float64)
    valid = np.asarray(res.valid, bool)
    stats = dict(frames=int(len(detected)), frames_with_hand=int(detected.sum()), valid=int(valid.sum()),
                 residual_median_mm=float(np.median(residual[valid]) * 1e3) if valid.any() else None)
    print(f"  MediaPipe + wj.solve on {video.name}: {stats}")

    clip = FIGURES / "overlay_sample.mp4"
    render_overlay(video, rec, res, clip, max_frames=CLIP_FRAMES, scale=CLIP_SCALE, progress=False)
    print(f"  {_rel(clip)}")
    strip = FIGURES / "overlay_strip.png"
    w, h = STRIP_SIZE
    with tempfile.TemporaryDirectory(prefix="wuji_make_docs_") as tmp:
        full = render_overlay(video, rec, res, Path(tmp) / "overlay.mp4", max_frames=max(STRIP_FRAMES) + 1,
                              scale=STRIP_SCALE, progress=False)
        cap = cv2.VideoCapture(str(full))
        frames, i = {}, 0
        while len(frames) < len(STRIP_FRAMES):
            ok, img = cap.read()
            if not ok:
                break
            if i in STRIP_FRAMES:
                frames[i] = img[:h, :w]
            i += 1
        cap.release()
    if len(frames) != len(STRIP_FRAMES):
        raise RuntimeError(f"the overlay video ended after {i} frames; the strip needs frames {STRIP_FRAMES}")
    gap = np.full((h, STRIP_GAP, 3), 255, np.uint8)
    row = [frames[STRIP_FRAMES[0]]]
    for k in STRIP_FRAMES[1:]:
        row += [gap, frames[k]]
    cv2.imwrite(str(strip), np.concatenate(row, axis=1), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"  {_rel(strip)}")
    cmd = ("`benchmarks/make_docs.py`: `wj.video.extract_landmarks` of `assets/samples/human_hand_video.mp4`, "
           "`wj.solve(..., side=\"auto\")`, `wj.overlay.render_overlay`")
    return [
        dict(file=_rel(clip), made=True, made_by=cmd + f" (max_frames={CLIP_FRAMES}, scale={CLIP_SCALE})",
             what=f"the first {CLIP_FRAMES / 30:.0f} s of the sample video with the overlay", **stats),
        dict(file=_rel(strip), made=True, made_by=cmd + f" (scale={STRIP_SCALE}), frames "
             + ", ".join(map(str, STRIP_FRAMES)) + f" cropped to {w} × {h}",
             what="three frames of the overlay (" + ", ".join(map(str, STRIP_FRAMES)) + "): open hand, fist, "
             "fingers raised", **stats),
    ]


def fig_inspire() -> list[dict]:
    path = FIGURES / "inspire_dexret.png"
    entry = dict(file=_rel(path), what="the six Inspire channels over dex-retargeting's 621-frame recording")
    if not DEXRET.exists():
        print(f"  note: {_rel(path)} left as it is: {DEXRET} is missing")
        return [dict(entry, made=False, why=f"{DEXRET.name} not found")]
    sys.path.insert(0, str(BENCH))
    import inspire_channels

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        inspire_channels.main(["--data", str(DEXRET), "--out", str(path)])
    text = buf.getvalue()
    print("  " + text.strip().replace("\n", "\n  "))
    table_rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| pose")]
    _compare_pose_table(table_rows)
    return [dict(entry, made=True, made_by=f"`benchmarks/inspire_channels.py --data {DEXRET.name} --out {_rel(path)}`",
                 pose_table=table_rows)]


def _compare_pose_table(rows: list[str]) -> None:
    """Say whether docs/inspire.md's hand-written pose table matches what inspire_channels.py prints."""
    text = INSPIRE_DOC.read_text(encoding="utf-8")
    wrong = [r for r in rows if r not in text]
    if wrong:
        print("  note: docs/inspire.md's pose table (outside make_docs.py's region) "
              "differs from benchmarks/inspire_channels.py now:\n    " + "\n    ".join(wrong))
    else:
        print("  docs/inspire.md's pose table matches benchmarks/inspire_channels.py")


def figures() -> None:
    sys.path.insert(0, str(BENCH))
    import wuji_jax as wj

    wj.enable_compilation_cache()
    state = git_state()
    print(f"pictures at commit {state['git_commit']}" + (" (wuji_jax/ has uncommitted changes)" if state["git_dirty"]
                                                         else ""))
    made: list[dict] = []
    steps: list[Callable[[], list[dict]]] = [fig_poses, fig_viewer, fig_overlay, fig_inspire]
    for step in steps:
        made += step()
    manifest = dict(generated_by="benchmarks/make_docs.py --figures-only",
                    date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **state, figures=made)
    MANIFEST.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {_rel(MANIFEST)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--tables-only", action="store_true", help="rewrite the README regions only (no pictures)")
    only.add_argument("--figures-only", action="store_true", help="regenerate the pictures only")
    ap.add_argument("--require-commit", action="store_true",
                    help="use only results that record their git commit (not those dated after "
                         f"{SOLVER_SINCE} without one)")
    args = ap.parse_args(argv)
    if not args.tables_only:
        figures()
    if not args.figures_only:
        tables(args.require_commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
