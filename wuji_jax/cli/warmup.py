"""``wuji-jax warmup``: compile the default programs into the persistent compilation cache.

A fresh process spends most of its first call compiling; with the programs in the cache
(:func:`wuji_jax.enable_compilation_cache`) it reads them back instead. :func:`warmup` compiles, at
the default settings, in float32:

* :func:`wuji_jax.solve` at :data:`wuji_jax.programs.STANDARD_SIZES` frames, cold and warm-started
  (``q0``);
* :class:`wuji_jax.FrameSolver`'s kernels (with and without ``q0``);
* the derivative of :func:`wuji_jax.solve` as eager ``jax.grad`` runs it (its forward and
  transposed programs, which any loss on the solved angles shares), at 8 frames;
* ``wuji-jax solve``'s program for a small job (the bundled sample, written to a temporary folder);
* ``wuji-jax live``'s command maps at its default settings, both sides (:func:`wuji_jax.live.compile_programs`;
  the task-space retarget's where an Inspire model is found).

Each step is timed; a step whose programs are already in the cache takes well under a second.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Callable

__all__ = ["warmup", "add_warmup_command"]


def _steps(hand, frames) -> list[tuple[str, Callable[[], object]]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import wuji_jax as wj

    from ..runtime.programs import STANDARD_SIZES

    steps = []
    for size in STANDARD_SIZES:
        y = frames[:size]
        q0 = np.broadcast_to(np.asarray(wj.neutral_angles(hand), np.float32), (size, hand.num_joints))
        steps.append((f"solve, {size} frame{'s' * (size > 1)}", lambda y=y: jax.block_until_ready(wj.solve(hand, y))))
        steps.append((f"solve, {size} frame{'s' * (size > 1)}, warm start",
                      lambda y=y, q0=q0: jax.block_until_ready(wj.solve(hand, y, q0=q0))))
    live = wj.FrameSolver(hand)
    steps.append(("FrameSolver", lambda: live.compile(q0=False)))
    steps.append(("FrameSolver, warm start", lambda: live.compile(q0=True)))
    y8 = jnp.asarray(frames[:8])
    grad = jax.value_and_grad(lambda y: jnp.sum(wj.solve(hand, y).angles))
    steps.append(("derivative of solve (jax.grad), 8 frames", lambda: jax.block_until_ready(grad(y8))))
    return steps


def _job() -> None:
    from ..pipeline.batch import sample_landmarks_path, solve_dataset

    with tempfile.TemporaryDirectory(prefix="wuji-jax-warmup-") as tmp:
        solve_dataset(str(sample_landmarks_path()), f"{tmp}/sample.parquet", side="auto", plot=False, progress=False)


def _live() -> None:
    from ..pipeline.live import compile_programs

    compile_programs()


def warmup(gradient: bool = True, job: bool = True, out=None, live: bool = True) -> list[tuple[str, float]]:
    """Compile the default programs (module docstring); returns ``(step, seconds)`` pairs and prints a
    line per step to ``out`` (default: stderr). ``gradient=False`` / ``job=False`` / ``live=False`` leave out
    the derivative's programs / ``wuji-jax solve``'s / ``wuji-jax live``'s. Turn the compilation cache on first
    (:func:`wuji_jax.enable_compilation_cache`; the ``wuji-jax warmup`` command does), or the programs
    last only as long as this process."""
    import numpy as np

    import wuji_jax as wj

    from ..pipeline.batch import sample_landmarks_path

    out = out or sys.stderr
    hand = wj.load_hand("right")
    frames = np.asarray(np.load(sample_landmarks_path())["world"], np.float32)
    steps = _steps(hand, frames)
    if not gradient:
        steps = [s for s in steps if not s[0].startswith("derivative")]
    if job:
        steps.append(("wuji-jax solve, the bundled sample", _job))
    if live:
        steps.append(("wuji-jax live, the command maps", _live))
    done = []
    for i, (name, step) in enumerate(steps, 1):
        t0 = time.perf_counter()
        step()
        seconds = time.perf_counter() - t0
        done.append((name, seconds))
        print(f"[{i}/{len(steps)}] {name}: {seconds:.1f} s", file=out, flush=True)
    return done


def add_warmup_command(sub) -> None:
    """The ``warmup`` verb of :mod:`wuji_jax.cli`."""
    p = sub.add_parser(
        "warmup",
        help="compile the default programs into the compilation cache",
        description="Compile wuji_jax's default programs (solve at the standard batch sizes, FrameSolver, "
        "the derivative of solve, the `wuji-jax solve` job, `wuji-jax live`'s command maps) into the persistent "
        "compilation cache, so that "
        "later processes read them instead of compiling. Prints each step's time and the cache folder.",
    )
    p.add_argument("--no-gradient", action="store_true", help="leave out the derivative's programs")
    p.add_argument("--no-job", action="store_true", help="leave out the `wuji-jax solve` job's programs")
    p.add_argument("--no-live", action="store_true", help="leave out `wuji-jax live`'s command maps")
    p.set_defaults(run=_run_warmup)


def _run_warmup(args) -> int:
    from ..runtime.cache import compilation_cache_dir

    folder = compilation_cache_dir()
    if folder is None:
        print("wuji-jax: warning: the compilation cache is off (--no-cache or WUJI_JAX_NO_CACHE): the programs "
              "are compiled, but not kept for later processes", file=sys.stderr)
    t0 = time.perf_counter()
    steps = warmup(gradient=not args.no_gradient, job=not args.no_job, live=not args.no_live)
    total = time.perf_counter() - t0
    print(f"compiled {len(steps)} steps in {total:.1f} s; cache: {folder or 'off'}")
    return 0
