"""The one rule for every file a ``wuji-jax`` verb writes (``solve``, ``inspire``, ``overlay``, ``view``,
``pose``), so that no verb destroys what it reads or leaves half a file under a final name:

* **Never an input.** :func:`check_output` refuses, before any work, an output that is an input, links
  to one (a symbolic link, or a hard link: the same ``st_dev``/``st_ino``), names it by another
  spelling (``sub/../x``, relative or absolute), lies in an input folder that a later run would read,
  or matches an input glob (``./g/*.parquet`` as well as ``g/*.parquet``).
* **Whole or absent.** :func:`replacing` and :func:`open_replacing` write to a temporary name in the
  output's own folder (``.<name>.<pid>.<token>.tmp<suffix>``: the suffix stays last, so that writers
  that choose the format by it, or append it, as ``numpy.savez`` does, still see it) and rename it
  into place with ``os.replace`` only once it is complete. A full disk, an exception or a kill leaves
  the final name as it was (absent, or the previous file); the temporary is removed on an
  exception, and a killed run's is removed by the next run on the same output.
* **The suffix names the format.** :func:`output_format` maps a suffix to its format and refuses a
  suffix of another format (``-o x.npy`` for JSON lines) in one line.

Every refusal is a :class:`OutputError` (a ``ValueError``), one line naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import json
import math
import os
import secrets
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Mapping

import numpy as np

__all__ = ["OutputError", "real_path", "same_file", "check_output", "output_format", "temporary_name",
           "replacing", "open_replacing", "write_text", "atomic_json", "strict_json"]


class OutputError(ValueError):
    """An output the rule refuses: one line naming the path and what to do."""


def real_path(p: Any) -> Path:
    """``p`` absolute, with every symbolic link and ``..`` resolved (never raises, even on a link loop)."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(p))))


def same_file(a: Any, b: Any) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same real path, or (both existing) the same
    device and inode, which a hard link shares."""
    if real_path(a) == real_path(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike)) and os.fspath(x) not in ("", "-")


def _glob_pattern(pattern: str) -> str:
    """An absolute pattern for ``pattern``: its leading part without wildcards resolved as a path (so
    ``./g/*.npz``, ``sub/../g/*.npz`` and an absolute spelling give one pattern)."""
    parts = Path(pattern).parts
    k = next((i for i, s in enumerate(parts) if glob.has_magic(s)), len(parts))
    head = real_path(Path(*parts[:k])) if k else real_path(".")
    return str(head.joinpath(*parts[k:])) if k < len(parts) else str(head)


def _matches_glob(out: Path, pattern: str) -> bool:
    """Whether ``out`` is or would be one of the files ``pattern`` expands to (``*`` taken to cross
    folders, as ``**`` does: refusing too much is safe, reading an output back is not)."""
    target = real_path(out)
    for pat in {pattern, os.path.abspath(pattern), _glob_pattern(pattern)}:
        if fnmatch.fnmatch(str(target), pat) or fnmatch.fnmatch(os.path.abspath(out), pat):
            return True
    try:
        return any(same_file(out, hit) for hit in glob.glob(pattern, recursive=True))
    except OSError:
        return False


def check_output(out: Any, inputs: Iterable[Any] = (), *, sources: Iterable[Any] = (),
                 outputs: Iterable[Any] = (), readable: bool = True, option: str = "-o") -> Path:
    """Refuse ``out`` (and the other files the run writes, ``outputs``) where it would destroy or be read
    back as an input; returns ``out`` as a :class:`~pathlib.Path`.

    Args:
        out: the output the user named.
        inputs: the files the run reads (paths; other items, such as camera indices or ``"-"``, are
            skipped). Refused: an output that is one of them by any spelling or link.
        sources: what the user gave as inputs, where a folder or a glob stands for files (``solve``).
            Refused when ``readable``: an output in an input folder, or matched by an input glob, which
            a later run would read as input.
        outputs: the other files the run writes beside ``out`` (a summary, a plot); checked as ``out``.
        readable: whether ``out`` has a suffix the run's reader would read back.
        option: the option that named ``out``, for the message.

    Raises:
        OutputError: one line, naming the path.
    """
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{option} {out}: is a folder; name the file to write")
    written = [out, *(Path(w) for w in outputs)]
    for f in inputs:
        if not _is_path(f):
            continue
        for w in written:
            if same_file(f, w):
                what = "" if w == out else f" ({w})"
                raise OutputError(f"{f}: is both an input and an output{what} of this run; write the output "
                                  f"elsewhere ({option})")
    if not readable:
        return out
    for s in sources:
        if not _is_path(s):
            continue
        p = Path(s)
        if p.is_dir() and any(real_path(w).parent == real_path(p) for w in written[:1]):
            raise OutputError(f"{out}: lies in the input folder {p}, so a later run would read it as input; "
                              f"write the output elsewhere ({option})")
        if isinstance(s, str) and glob.has_magic(s) and not p.exists() and _matches_glob(out, s):
            raise OutputError(f"{out}: matches the input pattern {s!r}, so a later run would read it as input; "
                              f"write the output elsewhere ({option})")
    return out


def output_format(out: Any, formats: Mapping[str, str], what: str, default: str | None = None,
                  given: str | None = None, option: str = "-o") -> str:
    """The format ``out``'s suffix names, from ``formats`` (lower-case suffix with its dot → format).

    A path without a suffix takes ``given`` (a ``--format`` option), else ``default``. Raises
    :class:`OutputError` (one line) for a suffix of no format in ``formats``, or one that disagrees with
    ``given``.
    """
    ext = Path(out).suffix.lower()
    if not ext:
        fmt = given or default
        if fmt is None:
            raise OutputError(f"{option} {out}: no suffix; end the name with "
                              + " or ".join(sorted(set(formats))) + f" ({what})")
        return fmt
    fmt = formats.get(ext)
    if fmt is None:
        known = ", ".join(dict.fromkeys(formats))
        raise OutputError(f"{option} {out}: {what} is written as {known}, not {Path(out).suffix!r}; "
                          "give the file the suffix of its format")
    if given is not None and given != fmt:
        raise OutputError(f"{option} {out} and --format {given} disagree; give one of them")
    return fmt


def temporary_name(path: Any) -> Path:
    """A fresh hidden name in ``path``'s folder that ends with ``path``'s suffix."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp{path.suffix}")


# os.fsync's errors that say the file cannot be synced this way (a file system without fsync; Windows,
# which cannot commit a read-only descriptor), not that its data failed to reach the disk
_CANNOT_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF})


def _fsync(path: Path) -> None:
    """Flush ``path``'s data to disk. An error that says the data may not be there (``ENOSPC``, ``EDQUOT``,
    ``EIO``: a full disk or quota is often reported only when the data goes out to disk) is raised, so
    that the file is not renamed over the previous one; where the file cannot be synced
    (:data:`_CANNOT_SYNC`) the rename still keeps the name whole or absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _CANNOT_SYNC:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Any, sync: bool = True) -> Iterator[Path]:
    """``with replacing(out) as tmp: writer(tmp)``: the file written to ``tmp`` becomes ``out`` when the
    block ends without an exception (flushed to disk unless not ``sync``, then ``os.replace``); on an
    exception, a failed flush (a full disk) included, ``tmp`` is removed and ``out`` is left as it was.
    Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        if not tmp.exists():
            raise OSError(f"{path}: the writer wrote nothing")
        if sync:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def open_replacing(path: Any, mode: str = "w", sync: bool = True, **kwargs: Any) -> Iterator[IO]:
    """``open(tmp, mode, **kwargs)`` inside :func:`replacing`: the file becomes ``path`` when the block ends."""
    with replacing(path, sync) as tmp, open(tmp, mode, **kwargs) as f:
        yield f
        f.flush()


def write_text(path: Any, text: str, sync: bool = True) -> Path:
    """``text`` as UTF-8 at ``path``, whole or not at all (:func:`replacing`)."""
    with open_replacing(path, "w", sync, encoding="utf-8", newline="") as f:
        f.write(text)
    return Path(path)


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float as ``None`` (strict JSON: no NaN or Infinity) and NumPy
    scalars as Python numbers."""
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def atomic_json(path: Any, obj: Any, sync: bool = True) -> Path:
    """``obj`` as strict JSON (:func:`strict_json`, indented, keys sorted) at ``path``, whole or not at all."""
    return write_text(path, json.dumps(strict_json(obj), indent=1, sort_keys=True, allow_nan=False), sync)
