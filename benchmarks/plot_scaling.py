"""Scaling curves from the saved results: FK and IK throughput over batch size, one line per device.

Reads every ``benchmarks/results/*.json`` that holds throughput rows — ``fk_*.json`` / ``fk-float64_*``
(``bench_fk.py``), ``ik_*.json`` (``bench_ik.py``; ``ik-quick_*`` smoke runs are skipped) and
``gpu_*.json`` (``bench_gpu.py``) — and draws log-log throughput against batch size for FK (keypoint
sets/s) and IK (frames/s), plus, when an ``ik_*.json`` has an iteration sweep, the IK joint error
(p99, noise-free and 1 mm noise) and frames/s against the number of LM iterations.

    PYTHONPATH=. python benchmarks/plot_scaling.py [--results benchmarks/results] [--out benchmarks/results/scaling.png]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import RESULTS, figure, save_figure  # noqa: E402


def device_label(hw: dict) -> str:
    """"NVIDIA H200" or "CPU ×2 (Intel Xeon …)" from a result's ``hardware`` block."""
    kind = hw.get("device_kind", "?")
    if hw.get("jax_backend") == "cpu" or kind.lower() == "cpu":
        model = hw.get("cpu_model", "").replace("(R)", "").replace("(TM)", "").replace(" Processor", "")
        return f"CPU ×{hw.get('cpu_count_usable', '?')} ({model.strip()})"
    return kind


def curves(path: Path) -> dict:
    """``{"fk": [(device, label, batches, rates)], "ik": [...], "iterations": [(device, label, rows)]}``
    of one file."""
    d = json.loads(path.read_text(encoding="utf-8"))
    device = device_label(d.get("hardware", {}))
    label = f"{device}, {d.get('dtype', 'float32')} — {path.name}"
    out: dict = {"fk": [], "ik": [], "iterations": []}

    def add(kind, rows, key):
        rows = [r for r in rows or () if key in r]
        if rows:
            out[kind].append((device, label, [r["batch"] for r in rows], [r[key] for r in rows]))

    name = path.stem
    if name.startswith("fk"):
        add("fk", d.get("results"), "sets_per_s")
    elif name.startswith("ik") and not d.get("quick"):
        add("ik", d.get("speed"), "frames_per_s")
        if d.get("iterations"):
            out["iterations"].append((device, label, d["iterations"]))
    elif name.startswith("gpu"):
        add("fk", d.get("fk"), "sets_per_s")
        add("ik", d.get("ik"), "frames_per_s")
    return out


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of result JSON files")
    ap.add_argument("--out", type=Path, default=RESULTS / "scaling.png")
    args = ap.parse_args(argv)

    found: dict = {"fk": [], "ik": [], "iterations": []}
    for path in sorted(args.results.glob("*.json")):
        for kind, items in curves(path).items():
            found[kind] += items
    if not (found["fk"] or found["ik"]):
        raise SystemExit(f"no FK/IK throughput results in {args.results}; run bench_fk.py / bench_ik.py first")

    devices = list(dict.fromkeys(item[0] for items in found.values() for item in items))
    color = {dev: f"C{i}" for i, dev in enumerate(devices)}  # one colour per device in every panel
    # a panel per kind with results (make_docs draws the FK results alone: the others describe older code)
    kinds = [(kind, unit) for kind, unit in (("fk", "keypoint sets / s"), ("ik", "frames / s")) if found[kind]]
    panels = len(kinds) + (1 if found["iterations"] else 0)
    fig, axes = figure(1, panels, size=(6.0 * panels, 4.8))
    for i, (kind, unit) in enumerate(kinds):
        ax = axes[0, i]
        for dev, label, batch, rate in found[kind]:
            ax.loglog(batch, rate, "o-", color=color[dev], markersize=3.5, linewidth=1.3, label=label)
        ax.set_title(f"{kind.upper()} throughput", fontsize=10)
        ax.set_xlabel("batch size", fontsize=9)
        ax.set_ylabel(unit, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper left")
    if found["iterations"]:
        ax = axes[0, len(kinds)]
        speed = ax.twinx()
        for dev, label, rows in found["iterations"]:
            it = [r["iterations"] for r in rows]
            ax.semilogy(it, [r["noise_free"]["joint_error_p99_deg"] for r in rows], "o-", color=color[dev],
                        markersize=3.5, label=f"p99 error, noise-free — {label}")
            ax.semilogy(it, [r["noise_1mm"]["joint_error_p99_deg"] for r in rows], "s--", color=color[dev],
                        markersize=3.5, label="p99 error, 1 mm noise")
            speed.plot(it, [r["frames_per_s"] for r in rows], ":", color=color[dev], linewidth=1.5,
                       label=f"frames/s (batch {rows[0]['batch']})")
        ax.set_title("IK iterations vs accuracy and speed", fontsize=10)
        ax.set_xlabel("LM iterations", fontsize=9)
        ax.set_ylabel("p99 joint error (°)", fontsize=9)
        speed.set_ylabel("frames / s (dotted)", fontsize=9)
        speed.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        lines = ax.get_legend_handles_labels()
        more = speed.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=6.5, loc="lower left")
    path = save_figure(fig, args.out)
    print("wrote", path)
    return path


if __name__ == "__main__":
    main()
