"""JAX's persistent compilation cache, switched on with one call.

Most of the time of a short ``wuji-jax`` run, or of the first ``wj.solve`` in a new Python process, is
XLA compiling the solver (seconds on a CPU). :func:`enable_compilation_cache` turns on JAX's
persistent compilation cache, so that a program compiled once is read back from disk by every later
process instead of being compiled again::

    import wuji_jax as wj

    wj.enable_compilation_cache()   # once, before the first solve; returns the folder (or None)
    res = wj.solve(hand, landmarks)  # compiles the first time, reads the compiled program afterwards

The ``wuji-jax`` command line does this itself (``--no-cache`` turns it off, ``--cache-dir DIR``
moves it); library users opt in with the call above.

What is cached: the XLA executables JAX compiles (every ``jax.jit`` program of the process, not
only wuji_jax's), one file each, under a key JAX computes from the program, the compile options and
XLA flags, the jax/jaxlib versions and the device kind and count. A new jax version, other XLA flags
or another device simply compiles again and adds new files; nothing stale is ever read.

Where: the first of

1. the ``path`` argument;
2. ``$WUJI_JAX_CACHE_DIR``;
3. the folder JAX was already told (``$JAX_COMPILATION_CACHE_DIR`` or ``jax.config``);
4. a per-user cache folder: ``$XDG_CACHE_HOME/wuji_jax/xla`` or ``~/.cache/wuji_jax/xla`` (Linux),
   ``~/Library/Caches/wuji_jax/xla`` (macOS), ``%LOCALAPPDATA%\\wuji_jax\\xla`` (Windows).

:func:`compilation_cache_dir` says which folder is in effect.

Clearing: delete the folder (``rm -rf ~/.cache/wuji_jax/xla``) at any time when no wuji_jax
process runs; it is rebuilt on demand. JAX does not limit its size (``jax_compilation_cache_max_size``
can, with the ``filelock`` package); old jax versions' files are never read again and can go.

Turning it off: ``WUJI_JAX_NO_CACHE=1`` in the environment makes :func:`enable_compilation_cache` do
nothing (``wuji-jax --no-cache`` likewise). A folder that cannot be created or written (a read-only
home) gives one warning and no cache, never an error.

Only JAX's public ``jax.config`` options are used: ``jax_compilation_cache_dir``, and
``jax_persistent_cache_min_compile_time_secs`` = 0 and ``jax_persistent_cache_min_entry_size_bytes``
= -1 (no size threshold), so that small programs are cached too (JAX's defaults skip programs that
compile in under a second). The folder is fixed when JAX first compiles after it is set: call
:func:`enable_compilation_cache` before the first computation; a later call with another folder
does not move a cache that is already in use.

As JAX warns, the cache is trusted code: do not point it at a folder others can write to.

Traced programs too: a process whose program is in the cache still traces and lowers it from Python
(seconds for the solver) to compute the cache key. :func:`cached_program` keeps
the lowered program as well (``jax.export``, public API) in ``<folder>/programs``, under a key of the
function, the argument structure, shapes, dtypes and shardings, the jax/jaxlib versions and a digest
of wuji_jax's own source files, so a later process reads it back (tens of ms) instead of tracing.
:func:`wuji_jax.solve` and the dataset runner (``wuji-jax solve``) use it.

Quick compilation: a program that runs briefly, once or a few times (a :class:`~wuji_jax.FrameSolver`
frame, :func:`wuji_jax.solve` on up to 64 frames, a ``wuji-jax solve`` job of up to
:data:`wuji_jax.programs.QUICK_JOB_FRAMES` frames), spends far longer compiling than running. For those
XLA:CPU is given :func:`quick_compile_options`: its older fusion code generator
(``xla_cpu_use_fusion_emitters=False``, a documented XLA option, passed through JAX's public
``compiler_options``), which compiles the solver in about 60 % of the time, with the same fit to
float32 rounding (``docs/performance.md``, "Quick options"). Which programs get them is
:func:`wuji_jax.programs.compile_options`'s rule; large batches and jobs keep XLA's defaults: there
the run time counts. ``WUJI_JAX_QUICK_COMPILE=0`` turns this off; a jaxlib that does not know the
option compiles with its defaults.

Side by side: XLA compiles a program on one core, and the solver's two stages do not depend on each
other's compilation. :func:`compile_side_by_side` lowers programs one after the other and compiles
each in a thread of its own while the next is lowered; the quickly compiled solver programs use it
(:func:`wuji_jax.solver.api.staged_program`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import warnings
from pathlib import Path

__all__ = ["enable_compilation_cache", "compilation_cache_dir", "default_cache_dir", "cached_program", "program_path",
           "quick_compile_options", "options_accepted", "QUICK_CPU_OPTIONS", "compile_side_by_side"]

#: environment variables read by :func:`enable_compilation_cache`
ENV_DIR = "WUJI_JAX_CACHE_DIR"
ENV_OFF = "WUJI_JAX_NO_CACHE"
#: ``0`` turns :func:`quick_compile_options` off (XLA's defaults for every program)
ENV_QUICK = "WUJI_JAX_QUICK_COMPILE"
#: XLA:CPU's options for programs that run briefly (:func:`quick_compile_options`)
QUICK_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}

_warned: set[str] = set()  # folders already warned about in this process


_NO = ("0", "false", "no", "off")  # an environment variable set to one of these says no


def _off() -> bool:
    return os.environ.get(ENV_OFF, "").strip().lower() not in ("",) + _NO


def default_cache_dir() -> Path:
    """The per-user folder used when neither ``path``, ``$WUJI_JAX_CACHE_DIR`` nor JAX name one."""
    home = Path.home()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(home / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "wuji_jax" / "xla"


def compilation_cache_dir() -> str | None:
    """The folder JAX's persistent compilation cache uses in this process, or None when it is off."""
    import jax

    path = jax.config.jax_compilation_cache_dir
    return path if path and jax.config.jax_enable_compilation_cache else None


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the folder used, or None when it stays off.

    Args:
        path: the folder (created if missing). Default: ``$WUJI_JAX_CACHE_DIR``, else the folder JAX
            already has (``$JAX_COMPILATION_CACHE_DIR``), else :func:`default_cache_dir`.

    Returns None, changing nothing, when ``WUJI_JAX_NO_CACHE=1`` is set (or JAX's own
    ``JAX_ENABLE_COMPILATION_CACHE=0``) or the folder cannot be
    created or written, or is not safe to load programs from: owned by another user, or writable by
    its group or others (then with one warning per folder naming it and ``$WUJI_JAX_CACHE_DIR``).
    Calling it again is harmless. Call it before JAX's first compilation (see the module docstring).
    """
    if _off():
        return None
    import jax

    if not jax.config.jax_enable_compilation_cache:  # JAX_ENABLE_COMPILATION_CACHE=0 says no
        return None
    if path is None:
        path = os.environ.get(ENV_DIR) or jax.config.jax_compilation_cache_dir
    try:
        folder = (Path(path).expanduser() if path else default_cache_dir()).absolute()
    except RuntimeError as e:  # no home folder to be found
        return _warn_once(str(path or "~"), str(e))
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
        # its programs are loaded and run: a folder another user could write to is someone else's code
        st = folder.stat()
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise PermissionError(f"owned by another user (uid {st.st_uid}); its programs would run as yours")
        if st.st_mode & 0o022:
            raise PermissionError(f"writable by others (mode {st.st_mode & 0o777:o}); its programs would run "
                                  "as yours: chmod go-w it, or choose another folder")
    except OSError as e:
        return _warn_once(str(folder), getattr(e, "strerror", None) or str(e) or type(e).__name__)

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return str(folder)


def _warn_once(folder: str, why: str) -> None:
    if folder not in _warned:
        _warned.add(folder)
        warnings.warn(f"wuji_jax: no compilation cache: cannot use {folder} ({why}); set {ENV_DIR} to a "
                      f"writable folder, or {ENV_OFF}=1 to silence this", RuntimeWarning, stacklevel=3)


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """SHA-256 of wuji_jax's own source files (a changed solver never reads an old program); once
    per process, as the installed jaxlib's version (:func:`_jaxlib_version`)."""
    h = hashlib.sha256()
    root = Path(__file__).parent.parent  # wuji_jax/, every subpackage
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _jaxlib_version() -> str:
    from importlib import metadata

    return metadata.version("jaxlib")


def quick_compile_options(platform: str) -> dict:
    """Compiler options for a program that runs briefly on ``platform`` (see "Quick compilation" in
    the module docstring): :data:`QUICK_CPU_OPTIONS` on the CPU, nothing elsewhere, nothing where
    ``$WUJI_JAX_QUICK_COMPILE`` is ``0`` or where this jaxlib does not know the options (asked once
    per process by compiling a one-line program). Pass the result as ``compiler_options``."""
    if platform != "cpu" or os.environ.get(ENV_QUICK, "").strip().lower() in _NO:
        return {}
    options = tuple(sorted(QUICK_CPU_OPTIONS.items()))
    return dict(options) if options_accepted(options) else {}


@functools.lru_cache(maxsize=None)
def options_accepted(options: tuple) -> bool:
    """Whether this jaxlib's CPU compiler takes ``options`` (a sorted tuple of ``(name, value)``): a
    probe compile of a tiny program, once per process. An unknown option is ``False``; any other
    failure is raised."""
    import jax
    import numpy as np

    x = jax.device_put(np.zeros(2, np.float32), jax.devices("cpu")[0])
    try:
        jax.jit(lambda v: v + 1).lower(x).compile(compiler_options=dict(options))
    except Exception as e:  # jaxlib: "INVALID_ARGUMENT: No such compile option: 'xla_…'"
        if "compile option" in str(e):
            return False
        raise
    return True


_programs: dict = {}  # key (or the function and options, with the cache off) → its jitted call, per process


def cached_program(fn, name: str, *args, compiler_options: dict | None = None):
    """``fn`` as a jitted callable for arguments shaped like ``args`` (the same pytree structure,
    shapes, dtypes and shardings), its traced program kept in the compilation cache folder.

    With the cache off (:func:`compilation_cache_dir` None) this is ``jax.jit(fn)``. Otherwise the
    program is exported (``jax.export``) on first use and read back by later processes, which then
    skip Python tracing and lowering; the compiled executable comes from JAX's persistent cache as
    usual. A program that cannot be exported or read back falls back to ``jax.jit(fn)``.
    ``compiler_options`` (e.g. :func:`quick_compile_options`) go to ``jax.jit``; each set of options
    is a program of its own.
    """
    import jax
    import jax.export  # a submodule: not an attribute of jax until imported (jax 0.6)

    options = dict(compiler_options or {}) or None
    options_key = repr(sorted((options or {}).items()))
    path = program_path(fn, name, *args)
    if path is None:
        plain = (fn, options_key)
        if plain not in _programs:
            _programs[plain] = jax.jit(fn, compiler_options=options)
        return _programs[plain]
    leaves, tree = jax.tree_util.tree_flatten(args)
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=array_sharding(x)) for x in leaves]
    # the exported program does not depend on the compiler's options; its compiled call does
    call_key = (path.stem, options_key)
    if call_key in _programs:
        return _programs[call_key]

    def flat(*xs):
        return fn(*jax.tree_util.tree_unflatten(tree, xs))

    exported = None
    try:
        if path.is_file():
            exported = jax.export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # unreadable or from an incompatible jax: trace again and replace it
        exported = None
    try:
        if exported is None:
            exported = jax.export.export(jax.jit(flat))(*specs)
            _write(path, exported.serialize())
        def program(*a):
            return exported.call(*jax.tree_util.tree_leaves(a))

        program.__name__ = program.__qualname__ = name  # names the compiled program (jit_<name>)
        call = jax.jit(program, compiler_options=options)
    except Exception:  # a program jax.export does not support: plain jit
        call = jax.jit(fn, compiler_options=options)
    _programs[call_key] = call
    return call


def program_path(fn, name: str, *args) -> Path | None:
    """Where :func:`cached_program` keeps ``fn``'s exported program for arguments shaped like
    ``args`` (the file may not exist yet), or None with the compilation cache off."""
    import jax

    folder = compilation_cache_dir()
    if folder is None:
        return None
    leaves, tree = jax.tree_util.tree_flatten(args)
    ident = repr((name, getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""), str(tree),
                  [(x.shape, str(x.dtype), str(array_sharding(x))) for x in leaves], jax.__version__,
                  _jaxlib_version(), bool(jax.config.jax_enable_x64),
                  [(d.platform, d.device_kind) for d in jax.devices()], _source_digest()))
    return Path(folder) / "programs" / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:40]}.jaxexport"


def compile_side_by_side(*calls) -> list:
    """Compile jitted programs side by side: ``calls`` are ``(program, args)`` pairs, ``program`` a
    jitted function or a function of no arguments that makes one (called when its turn comes, e.g.
    :func:`cached_program`, so that its tracing too runs while the programs before it compile), and
    ``args`` arrays or :class:`jax.ShapeDtypeStruct`. Each program is lowered here, one after the other
    (Python), and compiled in a thread of its own while the next is made and lowered: XLA compiles
    without holding Python's lock, so on a machine with two or more cores two programs take little
    longer than the larger one. Returns the compiled programs in order (:class:`jax.stages.Compiled`,
    JAX's ahead-of-time API: call them with arguments shaped like ``args``); the first error of any
    program is raised once all are done."""
    import threading

    errors: list = []
    compiled: dict = {}

    def run(i, lowered):
        try:
            compiled[i] = lowered.compile()
        except BaseException as e:  # raised in the caller's thread below
            errors.append(e)

    threads = []
    try:
        for i, (program, args) in enumerate(calls):
            program = program if hasattr(program, "lower") else program()
            # joined below; not a daemon (one stopped inside XLA by the interpreter's teardown, after a
            # Ctrl-C cut the join short, aborted the process: see wuji_jax.pipeline.kernel.Kernel.preload)
            thread = threading.Thread(target=run, args=(i, program.lower(*args)), name="wuji_jax-compile")
            thread.start()
            threads.append(thread)
    finally:
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return [compiled[i] for i in range(len(calls))]


def array_sharding(x):
    """``x``'s sharding, or None for numpy and for arrays on one device of JAX's default backend: both
    run on that backend, and share one program."""
    import jax

    sharding = getattr(x, "sharding", None)
    if isinstance(sharding, jax.sharding.SingleDeviceSharding) and \
            next(iter(sharding.device_set)).platform == jax.default_backend():
        return None
    return sharding


def _write(path: Path, data: bytes) -> None:
    """``data`` to ``path`` through a temporary file in the same folder (no half-written program is
    ever read; a failed write leaves nothing behind)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
