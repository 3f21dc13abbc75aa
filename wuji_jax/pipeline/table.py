"""The dataset runner's output: the table in input order, streamed as parts arrive or assembled from
the part files at the end (:class:`Assembler`, :func:`finish_table`), and the plot of its angles
(:func:`plot_angles`). Used by :func:`wuji_jax.batch.solve_dataset` and :mod:`wuji_jax.ray_cluster`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..data import io as wio
from ..data.outputs import replacing
from ..ik.config import FLAG_NAMES
from .store import read_part

__all__ = ["Assembler", "TableWriter", "finish_table", "assemble_parts", "import_writers", "plot_angles"]


#: at most this many frames are drawn (evenly strided): two per pixel column of the plot's panels
#: (900 px wide); more points cost drawing time and show nothing more
_PLOT_POINTS = 1_800


_FINGERS = ("thumb", "index", "middle", "ring", "pinky")


def _table(part: dict[str, np.ndarray], names: list[str], commands: Sequence[str],
           hands: dict[str, Any]) -> dict[str, np.ndarray]:
    from ..hand.model import load_hand

    side = str(part["side"])
    if side not in hands:
        hands[side] = load_hand(side)
    hand = hands[side]
    m = part["frame"].shape[0]
    t: dict[str, np.ndarray] = {
        "frame": part["frame"], "timestamp": part["timestamp"],
        "source": np.asarray(names, dtype=str)[part["source"]] if m else np.zeros(0, "<U1"),
        "side": np.full(m, side),
    }
    for j, jn in enumerate(hand.joint_names):
        t[jn] = part["angles"][:, j]
    for j, mn in enumerate(hand.mimic_names):
        t[mn] = part["coupled"][:, j]
    for j, c in enumerate("wxyz"):
        t[f"wrist_q{c}"] = part["quaternion"][:, j]
    for j, c in enumerate("xyz"):
        t[f"wrist_{c}"] = part["translation"][:, j]
    for k in ("scale", "residual_mm", "valid", "converged"):
        t[k] = part[k]
    t["fit_flags"] = part["flags"]  # not "flags": pandas' DataFrame.flags would hide it
    for j, column in enumerate(commands):
        t[column] = part["commands"][:, j]
    return t


class TableWriter:
    """Appends tables to ``out`` in :func:`wuji_jax.io.write_results`' layout; streams Parquet/CSV."""

    def __init__(self, out: Path):
        self.out = out
        self.ext = out.suffix.lower()
        self.tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp{out.suffix}")
        self.pq_writer = None
        self.csv = None
        self.tables: list[dict] = []

    def write(self, table: dict[str, np.ndarray]):
        if self.ext in (".parquet", ".pq"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            t = wio.arrow_table(table, pa)
            if self.pq_writer is None:
                meta = {b"wuji_jax.shapes": json.dumps({k: [] for k in table}).encode(),
                        b"wuji_jax.names": json.dumps({}).encode()}
                self.schema = t.schema.with_metadata({**(t.schema.metadata or {}), **meta})
                self.pq_writer = pq.ParquetWriter(self.tmp, self.schema,
                                                  use_dictionary=wio.dictionary_columns(self.schema, pa))
            self.pq_writer.write_table(t.cast(self.schema))
        elif self.ext == ".csv":
            part = self.tmp.with_name(self.tmp.name + ".part.csv")
            wio.write_results(part, table)
            with open(part, encoding="utf-8", newline="") as f:
                header = f.readline()
                if self.csv is None:
                    self.csv = open(self.tmp, "w", encoding="utf-8", newline="")
                    self.csv.write(header)
                shutil.copyfileobj(f, self.csv)
            part.unlink()
        else:
            self.tables.append(table)

    def close(self):
        if self.pq_writer is not None:
            self.pq_writer.close()
        elif self.csv is not None:
            self.csv.close()
        elif self.tables:
            wio.write_results(self.tmp, {k: np.concatenate([t[k] for t in self.tables]) for k in self.tables[0]})
        os.replace(self.tmp, self.out)

    def abort(self):
        for h in (self.pq_writer, self.csv):
            try:
                if h is not None:
                    h.close()
            except Exception:  # best effort: the temporary file is removed next
                pass
        self.tmp.unlink(missing_ok=True)


class Assembler:
    """Appends solved parts, in stream order, to ``out`` (:class:`TableWriter`) and keeps what the summary
    and the plot need: flag and valid counts, the valid frames' residuals, and a sample of every
    ``stride``-th row (``stride`` from ``n_rows``, the rows expected, so that at most
    ``_PLOT_POINTS`` are drawn). :meth:`close` renames the table into place."""

    def __init__(self, out: Path, names: list[str], commands: Sequence[str], n_rows: int):
        self.out, self.names, self.commands, self.n_rows = out, names, tuple(commands), n_rows
        self.stride = max(1, -(-n_rows // _PLOT_POINTS))
        self.writer = TableWriter(out)
        self.hands: dict[str, Any] = {}
        self.residual: list[np.ndarray] = []
        self.sample: list[dict] = []
        self.sources: set[int] = set()  # the files whose rows were written
        self.frames = self.flagged = self.valid = 0
        self.flag_counts = dict.fromkeys(FLAG_NAMES, 0)
        self.closed = False

    def add(self, part: dict[str, np.ndarray]) -> None:
        m = part["frame"].shape[0]
        if m == 0:
            return
        self.writer.write(_table(part, self.names, self.commands, self.hands))
        self.sources.update(np.unique(part["source"]).tolist())
        flags, valid, residual = part["flags"], part["valid"], part["residual_mm"]
        self.flagged += int(np.count_nonzero(flags))
        for bit in self.flag_counts:
            self.flag_counts[bit] += int(np.count_nonzero(flags & bit))
        self.valid += int(np.count_nonzero(valid))
        self.residual.append(residual[valid & np.isfinite(residual)].astype(np.float64))
        rows = np.arange(self.frames, self.frames + m)
        pick = rows % self.stride == 0
        bad = ~valid[pick]  # drawn as gaps: their angles are only the start pose
        self.sample.append({"row": rows[pick], "t": part["timestamp"][pick],
                            "angles": np.where(bad[:, None], np.nan, part["angles"][pick]),
                            "residual_mm": np.where(bad, np.nan, residual[pick]),
                            "joint_names": self.hands[str(part["side"])].joint_names})
        self.frames += m

    def close(self) -> dict[str, Any]:
        """Finish the table (``out`` appears now) and return the statistics; a row count other than
        ``n_rows`` removes it and raises (the manifest and the parts disagree: never a silently wrong
        table)."""
        if self.frames != self.n_rows:
            self.abort()
            raise RuntimeError(f"{self.out}: assembled {self.frames} rows but the inputs hold {self.n_rows}; "
                               "run again with resume=False")
        self.writer.close()
        self.closed = True
        return {"frames": self.frames, "flagged": self.flagged, "valid": self.valid,
                "flag_counts": {FLAG_NAMES[b]: c for b, c in self.flag_counts.items()},
                "residual_valid": np.concatenate(self.residual) if self.residual else np.zeros(0),
                "sample": self.sample}

    def abort(self) -> None:
        """Remove the unfinished table (nothing once :meth:`close` has put it in place)."""
        if not self.closed:
            self.closed = True
            self.writer.abort()


def finish_table(stream: Assembler | None, complete: bool, out: Path, part_files: list[Path], failed: set[int],
                  files: Sequence[Any], commands: Sequence[str], n_rows: int, digest: str) -> dict[str, Any]:
    """The table in place and its statistics: ``stream``'s where it was given every part
    (``complete``), holds the ``n_rows`` rows wanted (as many as it expected) and none of a ``failed``
    file; else it is dropped and the part files are assembled (:func:`assemble_parts`)."""
    if stream is not None and complete and stream.frames == n_rows == stream.n_rows and \
            not stream.sources & failed:
        return stream.close()
    if stream is not None:
        stream.abort()
    return assemble_parts(out, part_files, failed, files, commands, n_rows, digest)


def assemble_parts(out: Path, part_files: list[Path], failed: set[int], files: Sequence[Any],
              commands: Sequence[str], n_rows: int, digest: str) -> dict[str, Any]:
    """Concatenate the part files in order into ``out`` (the rows of ``failed`` files left out), the
    parts' ``commands`` array written as the columns named ``commands`` (none: no command columns);
    :meth:`Assembler.close`'s statistics and plot sample."""
    asm = Assembler(out, [str(f) for f in files], commands, n_rows)
    drop = np.fromiter(failed, np.int32, len(failed))
    try:
        for pf in part_files:
            try:
                part = read_part(pf)
            except Exception as e:  # a damaged part: removed, so that the next run solves it again
                pf.unlink(missing_ok=True)
                raise RuntimeError(f"{pf}: damaged part ({type(e).__name__}: {e}); removed: run the same "
                                   "command again to solve its frames anew") from None
            if str(part.get("run")) != digest:
                raise RuntimeError(f"{pf}: written by another run (different inputs or settings); run again "
                                   "with --no-resume (resume=False)")
            keep = ~np.isin(part["source"], drop)
            if not keep.all():
                part = {k: (v if v.ndim == 0 else v[keep]) for k, v in part.items()}
            asm.add(part)
    except BaseException:
        asm.abort()
        raise
    return asm.close()


def import_writers(plot: bool, parquet: bool) -> None:
    """Import what writes the plot and the Parquet table (in a thread of its own, ahead of use)."""
    if parquet:
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:  # the writer says so
            pass
    if plot:
        try:
            from ..viz import agg_figure_classes

            agg_figure_classes()
        except ImportError:  # said by plot_angles, in the run's notes
            pass


def plot_angles(path: Path, sample: list[dict], one_source: bool) -> Path:
    """Angles over time (five finger panels, degrees) and the residual, from the strided sample."""
    from ..viz import agg_figure_classes

    Figure, FigureCanvasAgg = agg_figure_classes()
    rows = np.concatenate([s["row"] for s in sample])
    t = np.concatenate([s["t"] for s in sample])
    ang = np.degrees(np.concatenate([s["angles"] for s in sample]).astype(np.float64))
    res = np.concatenate([s["residual_mm"] for s in sample]).astype(np.float64)
    names = sample[0]["joint_names"]
    use_t = one_source and t.size > 0 and np.isfinite(t).all()
    x = t if use_t else rows
    fig = Figure(figsize=(10.0, 12.0), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(6, 1, sharex=True)
    for f, (ax, finger) in enumerate(zip(axes, _FINGERS)):
        for j in range(4 * f, 4 * f + 4):
            label = names[j].replace("_finger", "").split("_", 1)[1] if "_" in names[j] else names[j]
            ax.plot(x, ang[:, j], linewidth=1.0, label=label)
        ax.set_ylabel(f"{finger} (deg)", fontsize=9)
        ax.legend(fontsize=7, loc="upper right", ncol=4)
        ax.grid(alpha=0.3)
    axes[5].plot(x, res, color="k", linewidth=0.8)
    axes[5].set_ylabel("residual (mm)", fontsize=9)
    axes[5].grid(alpha=0.3)
    axes[5].set_xlabel("time (s)" if use_t else "frame (output row)", fontsize=9)
    fig.suptitle(f"joint angles and fit residual, {rows.size:,} frames shown", fontsize=11)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.045, top=0.955, hspace=0.12)  # (tight_layout is slower)
    with replacing(path) as tmp:  # a full disk leaves no truncated picture under the final name
        fig.savefig(tmp, format="png", pil_kwargs={"compress_level": 1})  # (level 6: slower, a few % smaller)
    return path
