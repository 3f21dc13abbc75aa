"""The dataset runner's store on disk: a run's identity (:func:`run_identity`), its finished parts
(``<out>.parts/``: :func:`write_part`, :func:`part_ok`, :func:`read_part`) and manifest
(:func:`open_parts`, :func:`atomic_json`), the outputs' checks and the lock that keeps two runs
from writing one output (:class:`OutputLock`). Used by :func:`wuji_jax.batch.solve_dataset` and
:mod:`wuji_jax.ray_cluster`."""

from __future__ import annotations

import glob
import json
import contextlib
import os
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..data import io as wio
from ..data import outputs
from ..data.io import content_hash  # noqa: F401 (re-exported: wuji_jax.pipeline.store.content_hash)

__all__ = ["MANIFEST_VERSION", "run_identity", "out_path", "check_outputs", "remove_stale_temporaries", "OutputLock",
           "open_parts", "write_part", "part_ok", "read_part", "part_arrays", "atomic_json", "content_hash"]


MANIFEST_VERSION = 1


def atomic_json(path: Path, obj: Any):
    """:func:`wuji_jax.outputs.atomic_json` without the flush to disk (rewritten after every file)."""
    outputs.atomic_json(path, obj, sync=False)


def write_part(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """One finished chunk, atomically: a part file is either complete or absent."""
    with outputs.open_replacing(path, "wb") as f:
        np.savez(f, **arrays)


def part_ok(path: Path, digest: str) -> bool:
    """Whether a part file is whole (its zip directory reads) and was written for ``digest``."""
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            return "run" in z.files and str(z["run"]) == digest
    except Exception:  # any damage: the part is solved again
        return False


def read_part(path: Path) -> dict[str, np.ndarray]:
    with open(path, "rb") as fh:
        return part_arrays(fh)


def part_arrays(fh) -> dict[str, np.ndarray]:
    """The arrays of a part file's bytes (an open binary file)."""
    with np.load(fh, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def run_identity(files: Sequence[Any], chunk_size: int, side: str, config, inspire: bool,
                 check_units: bool, fps: float | None, dtype, devices: Sequence[Any], batch_size: int,
                 compile_options: dict | None = None, target=None) -> dict:
    """What a resumed run must share with the interrupted one for its parts to be reused: every
    input's bytes (a full SHA-256, so an input rewritten in place with the same size and time is
    noticed), the settings, the device kind and count, the batch size and the compile options (all
    three change float rounding), and with ``inspire`` (the command channels) the robot ``target``'s
    :meth:`~wuji_jax.retarget.target.Target.identity` (its command map, its models' paths and SHA-256),
    so that a resume never mixes maps or models."""
    from .. import __version__

    inputs = []
    for f in files:
        if isinstance(f, int) and not isinstance(f, bool):
            raise ValueError(f"camera {f}: solve_dataset reads recordings; record the camera to a file "
                             "first (wuji_jax.video.extract_landmarks)")
        p = Path(f)
        try:
            st = p.stat()
            digest = content_hash(p) if p.is_file() else None  # a folder of images: path, size, time
            inputs.append({"path": os.path.realpath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                           "sha256": digest})
        except OSError:
            inputs.append({"path": os.path.realpath(p), "size": None, "mtime_ns": None, "sha256": None})
    commands = {"target": target.name, **target.identity()} if inspire and target is not None else {"target": None}
    return {"inputs": inputs, "chunk_size": int(chunk_size), "side": side, "inspire": bool(inspire),
            "check_units": bool(check_units), "fps": fps, "dtype": np.dtype(dtype).name,
            "solver": {"static": list(config.static()),
                       "traced": {k: float(v) for k, v in config.numbers().items()}},
            "devices": [devices[0].platform, len(devices)], "batch_size": int(batch_size),
            "compile_options": sorted([k, repr(v)] for k, v in (compile_options or {}).items()),
            **commands, "wuji_jax": __version__}


def out_path(out: Any) -> Path:
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; name the table to write inside it, e.g. {out / 'angles.parquet'}")
    ext = out.suffix.lower()
    if ext not in (".parquet", ".pq", ".npz", ".csv"):
        raise ValueError(f"{out}: unsupported output extension {out.suffix!r}; use .parquet, .npz or .csv")
    if ext in (".parquet", ".pq"):
        import importlib.util

        if importlib.util.find_spec("pyarrow") is None:
            raise ImportError(f"{out}: writing Parquet needs pyarrow (pip install 'wuji-jax[formats]'); "
                              "or write .npz / .csv")
    return out


def _outputs_of(out: Path) -> list[Path]:
    """Every path a run writes: the table, its summary, plot, parts folder and lock."""
    return [out, out.with_name(out.stem + "_summary.json"), out.with_name(out.stem + "_plot.png"),
            Path(str(out) + ".parts"), _lock_path(out)]


def check_outputs(source: Any, files: Sequence[Any], out: Path) -> None:
    """Refuse, before any work, a run whose outputs would overwrite or later be read as its inputs
    (:func:`wuji_jax.outputs.check_output`), or whose inputs lie in its parts folder."""
    written = _outputs_of(out)
    sources = [source] if isinstance(source, (str, os.PathLike, int)) else list(source)
    outputs.check_output(out, files, sources=sources, outputs=written[1:],
                         readable=out.suffix.lower() in wio.DATA_EXTENSIONS)
    parts = outputs.real_path(written[3])
    for f in files:
        if not isinstance(f, int) and outputs.real_path(f).is_relative_to(parts):
            raise ValueError(f"{f}: lies in this run's parts folder {written[3]}; write the output elsewhere (-o)")


def remove_stale_temporaries(out: Path) -> None:
    """Temporary files a killed run left next to ``out`` (the caller holds the lock: nobody else
    writes them)."""
    for stem in (out.name, out.stem + "_summary.json", out.stem + "_plot.png"):
        for tmp in out.parent.glob(f".{glob.escape(stem)}.*.tmp*"):
            tmp.unlink(missing_ok=True)
        for tmp in out.parent.glob(f"{glob.escape(stem)}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's process) or cannot tell: assume alive
    return True


class OutputLock:
    """``<out>.lock``: held with ``flock`` (released by the system when its process ends, however it
    ends) and holding the PID, host and start time of the run that writes ``out``. A second run on the
    same output refuses, naming the first; a lock file left by a dead process on this host is taken
    over in place (no unlink and create again, so two runs racing for a stale lock cannot both win).

    A lock file whose holder released it (unlinked, then closed) is not taken: the run checks, once it
    holds the ``flock``, that the file it locked is still the one at the path, and tries again if not.
    Without ``fcntl`` (Windows) the file is created exclusively and a stale one must be deleted by hand.

    Raises (on entry) ``ValueError``, one line naming the other run and the lock file."""

    def __init__(self, out: Path):
        self.path = _lock_path(out)
        self.out = out
        self.mine = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "token": secrets.token_hex(8)})
        self._fd: int | None = None

    def _refuse(self, text: str, held: bool):
        try:
            other = json.loads(text)
            pid, host = int(other["pid"]), str(other["host"])
        except (ValueError, KeyError, TypeError):
            other, pid, host = {}, None, None
        if pid is not None:
            who = f"PID {pid} on {host}, started {other.get('started', '?')}"
        else:
            who = "a run that is starting" if held else "a run whose lock file is unreadable"
        raise ValueError(f"{self.out}: another run ({who}) is writing this output; wait for it or "
                         f"choose another -o (if that run is gone, delete {self.path})")

    def _stale(self, text: str) -> bool:
        """Whether a lock file's ``text`` names no live run: empty (its writer died before writing) or
        a process of this host that is gone."""
        if not text.strip():
            return True
        try:
            other = json.loads(text)
            pid, host = int(other["pid"]), str(other["host"])
        except (ValueError, KeyError, TypeError):
            return False
        return host == socket.gethostname() and not _alive(pid)

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # no flock: exclusive creation only
            return self._enter_exclusive()
        for _ in range(100):
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # held by a live run
                    self._refuse(_read_fd(fd), held=True)
                try:
                    current = os.stat(self.path)
                except FileNotFoundError:
                    current = None
                st = os.fstat(fd)
                if current is None or (current.st_dev, current.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)  # its holder released it (unlinked) after we opened it: a fresh file
                    continue
                text = _read_fd(fd)
                if text and not self._stale(text):
                    self._refuse(text, held=False)  # a lock file of a run that holds no flock (a live PID)
                os.ftruncate(fd, 0)
                os.pwrite(fd, self.mine.encode(), 0)
                self._fd = fd
                return self
            except BaseException:
                if self._fd is None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise
        raise ValueError(f"{self.out}: could not take the lock {self.path}; delete it if no run is writing")

    def _enter_exclusive(self):
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                text = self.path.read_text()
            except OSError:
                text = ""
            self._refuse(text, held=False)
        with os.fdopen(fd, "w") as f:
            f.write(self.mine)
        return self

    def __exit__(self, *exc):
        fd, self._fd = self._fd, None
        try:
            st = os.stat(self.path)
            held = None if fd is None else os.fstat(fd)
            ours = held is None or (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
            if ours and self.path.read_text() == self.mine:
                self.path.unlink()  # before the flock goes: a run waiting on this file sees it gone
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
        return False


def _read_fd(fd: int, limit: int = 1 << 16) -> str:
    """The text of an open file from its start (at most ``limit`` bytes; undecodable bytes replaced)."""
    try:
        return os.pread(fd, limit, 0).decode("utf-8", "replace")
    except OSError:
        return ""


def _temporary(name: str) -> bool:
    """Whether a file name in a parts folder is a temporary of :mod:`wuji_jax.outputs` (or of an older run)."""
    return name.endswith(".tmp") or (name.startswith(".") and ".tmp" in name)


def open_parts(out: Path, identity: dict, resume: bool, notes: list, what: str = "") -> tuple:
    """``<out>.parts/`` ready for this run: refused if it holds other files; an interrupted run's
    manifest with the same version and ``identity`` is returned for reuse (``resume``), else the
    folder is emptied (with a note). Returns ``(parts_dir, manifest_path, old manifest or None)``."""
    parts_dir = Path(str(out) + ".parts")
    manifest_path = parts_dir / "manifest.json"
    reuse = None
    if parts_dir.exists():
        foreign = [] if not parts_dir.is_dir() else [p.name for p in parts_dir.iterdir() if not (
            p.name == "manifest.json" or _temporary(p.name) or (p.name.startswith("chunk_")
                                                                     and p.suffix == ".npz"))]
        if foreign or not parts_dir.is_dir():
            raise ValueError(f"{parts_dir}: exists and holds other files ({', '.join(foreign[:3]) or 'not a folder'}); "
                             "it is not a folder of solve_dataset parts: move it or write elsewhere")
        old = None
        try:
            old = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            pass
        if resume and old and old.get("version") == MANIFEST_VERSION and old.get("identity") == identity:
            reuse = old
        else:
            if resume and old is not None:
                notes.append(f"{parts_dir}: the inputs or settings changed since the interrupted run{what}; "
                             "started over")
            shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    for stale in parts_dir.iterdir():
        if _temporary(stale.name):
            stale.unlink()
    return parts_dir, manifest_path, reuse
