"""The persistent compilation cache (``wuji_jax.runtime.cache``) and the command line's ``--cache-dir`` /
``--no-cache``.

Whether compiled programs land on disk and are read back is checked in fresh Python processes (a
small ``jax.jit`` function, no solver): this test process has started JAX with the suite's settings,
and JAX fixes its cache folder at the first compilation after one is set. The in-process tests only
read the return value and ``jax.config``, and put ``jax.config`` back, compiling nothing meanwhile.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest

from wuji_jax.runtime.cache import compilation_cache_dir, default_cache_dir, enable_compilation_cache
from wuji_jax.cli import main

ROOT = Path(__file__).resolve().parents[1]

_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")

# one small jitted function; prints the folder in effect and JAX's cache hit / miss counts
_CHILD = r"""
import json, sys
import jax.monitoring
counts = {"hits": 0, "misses": 0}
def listen(event, **kw):
    if event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        counts["misses"] += 1
jax.monitoring.register_event_listener(listen)

from wuji_jax.runtime.cache import compilation_cache_dir, enable_compilation_cache
arg = sys.argv[1] if len(sys.argv) > 1 else None
used = enable_compilation_cache(arg)
import jax.numpy as jnp
@jax.jit
def cache_probe(x):
    return jnp.sin(x) * 2.0 + x ** 2
cache_probe(jnp.arange(16.0)).block_until_ready()
print(json.dumps({"used": used, "dir": compilation_cache_dir(), **counts}))
"""


def _clean_env(**extra) -> dict:
    """The environment without the suite's XLA flags and without any JAX / wuji_jax cache settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "XLA_", "WUJI_JAX_CACHE", "WUJI_JAX_NO_CACHE"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def _child(env: dict, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.endswith("-cache")} if folder.is_dir() else set()


@pytest.fixture
def restore_config():
    """Put back the cache options an in-process call of enable_compilation_cache changed."""
    before = {k: getattr(jax.config, k) for k in _OPTIONS}
    yield
    for k, v in before.items():
        jax.config.update(k, v)


def test_programs_are_written_then_read_back(tmp_path):
    cache = tmp_path / "xla"  # does not exist yet: enable_compilation_cache creates it
    env = _clean_env(WUJI_JAX_CACHE_DIR=str(cache))

    first = _child(env)
    assert first["used"] == first["dir"] == str(cache)
    files = _entries(cache)
    assert any(name.startswith("jit_cache_probe-") for name in files), sorted(files)
    assert first["misses"] >= 1 and first["hits"] == 0, first

    second = _child(env)
    assert second["hits"] >= 1 and second["misses"] == 0, second  # read back, nothing compiled anew
    assert _entries(cache) == files


def test_explicit_path_beats_the_environment(tmp_path):
    env = _clean_env(WUJI_JAX_CACHE_DIR=str(tmp_path / "from_env"))
    out = _child(env, str(tmp_path / "given"))
    assert out["used"] == str(tmp_path / "given")
    assert _entries(tmp_path / "given") and not (tmp_path / "from_env").exists()


def test_in_process_return_value_and_config(tmp_path, monkeypatch, restore_config):
    monkeypatch.delenv("WUJI_JAX_NO_CACHE", raising=False)
    monkeypatch.delenv("WUJI_JAX_CACHE_DIR", raising=False)
    folder = tmp_path / "a" / "b"
    assert enable_compilation_cache(folder) == str(folder)
    assert folder.is_dir()
    assert compilation_cache_dir() == str(folder) == jax.config.jax_compilation_cache_dir
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes <= 0
    assert enable_compilation_cache(folder) == str(folder)  # idempotent
    # no argument, no WUJI_JAX_CACHE_DIR: the folder JAX already has stays
    assert enable_compilation_cache() == str(folder)
    monkeypatch.setenv("WUJI_JAX_CACHE_DIR", str(tmp_path / "env"))
    assert enable_compilation_cache() == str(tmp_path / "env")


def test_default_folder_is_per_user(tmp_path, monkeypatch, restore_config):
    monkeypatch.setattr(sys, "platform", "linux")  # the XDG rule (macOS and Windows have their own folders)
    for k in ("WUJI_JAX_NO_CACHE", "WUJI_JAX_CACHE_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expect = tmp_path / "xdg" / "wuji_jax" / "xla"
    assert default_cache_dir() == expect
    jax.config.update("jax_compilation_cache_dir", None)
    assert enable_compilation_cache() == str(expect) and expect.is_dir()
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "wuji_jax" / "xla"


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_no_cache_environment_variable(tmp_path, monkeypatch, restore_config, value):
    monkeypatch.setenv("WUJI_JAX_NO_CACHE", value)
    monkeypatch.setenv("WUJI_JAX_CACHE_DIR", str(tmp_path / "env"))
    before = {k: getattr(jax.config, k) for k in _OPTIONS}
    assert enable_compilation_cache() is None
    assert enable_compilation_cache(tmp_path / "given") is None
    assert not (tmp_path / "env").exists() and not (tmp_path / "given").exists()
    assert {k: getattr(jax.config, k) for k in _OPTIONS} == before


def test_no_cache_in_a_fresh_process(tmp_path):
    env = _clean_env(WUJI_JAX_CACHE_DIR=str(tmp_path / "xla"), WUJI_JAX_NO_CACHE="1")
    out = _child(env)
    assert out["used"] is None and out["dir"] is None
    assert not (tmp_path / "xla").exists()


def test_unusable_folder_warns_once_and_returns_none(tmp_path, monkeypatch, restore_config):
    monkeypatch.delenv("WUJI_JAX_NO_CACHE", raising=False)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    folder = blocker / "xla"  # cannot be created, whoever runs the test
    before = {k: getattr(jax.config, k) for k in _OPTIONS}
    with pytest.warns(RuntimeWarning) as caught:
        assert enable_compilation_cache(folder) is None
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "\n" not in text and str(folder) in text and "WUJI_JAX_CACHE_DIR" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        assert enable_compilation_cache(folder) is None
    assert {k: getattr(jax.config, k) for k in _OPTIONS} == before
    assert not folder.exists()


# ----------------------------------------------------------------------------------- command line


def _cli(env: dict, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wuji_jax", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_cli_caches_by_default_and_obeys_its_options(tmp_path):
    home_cache = tmp_path / "xdg"
    env = _clean_env(XDG_CACHE_HOME=str(home_cache))
    r = _cli(env, "pose", "fist", "-o", "p.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _entries(home_cache / "wuji_jax" / "xla"), "the command did not fill the per-user cache"

    for argv in (["--cache-dir", "c1", "pose", "fist", "-o", "p.png"],   # before COMMAND
                 ["pose", "fist", "-o", "p.png", "--cache-dir=c2"]):     # after it
        r = _cli(env, *argv, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert _entries(tmp_path / "c1") and _entries(tmp_path / "c2")

    r = _cli(_clean_env(WUJI_JAX_CACHE_DIR=str(tmp_path / "c3")), "pose", "fist", "-o", "p.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _entries(tmp_path / "c3")


def test_cli_no_cache(tmp_path):
    env = _clean_env(WUJI_JAX_CACHE_DIR=str(tmp_path / "c"))
    r = _cli(env, "--no-cache", "pose", "--list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _cli(dict(env, WUJI_JAX_NO_CACHE="1"), "pose", "--list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "c").exists()


def test_cli_unusable_folder_is_a_one_line_warning(tmp_path):
    (tmp_path / "f").write_text("")
    r = _cli(_clean_env(), "--cache-dir", str(tmp_path / "f" / "x"), "pose", "--list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wuji-jax: warning: no compilation cache"), r.stderr
    assert "--cache-dir" in lines[0] and "--no-cache" in lines[0]


def test_cli_usage_errors_are_one_line(tmp_path, capsys, restore_config):
    before = {k: getattr(jax.config, k) for k in _OPTIONS}
    assert main(["--no-cache", "--cache-dir", str(tmp_path / "c"), "pose", "--list"]) == 2
    assert main(["pose", "--list", "--cache-dir="]) == 2
    assert main(["pose", "--list", "--cache-dir"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("wuji-jax: error: ") for line in err), err
    assert "not both" in err[0] and "--cache-dir" in err[1]
    # called from this running program (JAX started), without --cache-dir: its cache settings stand
    assert main(["pose", "--list"]) == 0
    assert {k: getattr(jax.config, k) for k in _OPTIONS} == before
    assert not (tmp_path / "c").exists()


def test_help_documents_the_options(capsys):
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for words in ("--cache-dir DIR", "--no-cache", "WUJI_JAX_NO_CACHE=1", "WUJI_JAX_CACHE_DIR",
                  "~/.cache/wuji_jax/xla"):
        assert words in out, words
    assert main(["solve", "--help"]) == 0
    assert "--no-cache" in capsys.readouterr().out


_PROGRAM_CHILD = r"""
import json, sys
import numpy as np
from wuji_jax.runtime.cache import cached_program, enable_compilation_cache
enable_compilation_cache(sys.argv[1]) if sys.argv[1] != "off" else None
import jax.numpy as jnp
traced = []
def probe(d, x):
    traced.append(1)  # runs only while JAX traces the function
    return {"y": jnp.sin(x) * d["a"] + x ** 2}
args = ({"a": np.float32(2.0)}, np.arange(8, dtype=np.float32))
out = cached_program(probe, "probe", *args)(*args)
again = cached_program(probe, "probe", *args)(*args)
print(json.dumps({"traced": len(traced), "y": np.asarray(out["y"]).tolist(),
                  "same": bool((np.asarray(again["y"]) == np.asarray(out["y"])).all())}))
"""


def _program_child(env, arg):
    r = subprocess.run([sys.executable, "-c", _PROGRAM_CHILD, arg], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_traced_programs_are_kept_and_read_back_without_tracing(tmp_path):
    """cached_program: the first process traces and exports the function once, a later one reads the
    program back and never traces it; same values; a corrupt file is replaced; off: plain jit."""
    import numpy as np

    env = _clean_env()
    want = (np.sin(np.arange(8, dtype=np.float32)) * np.float32(2) + np.arange(8, dtype=np.float32) ** 2).tolist()
    first = _program_child(env, str(tmp_path / "c"))
    assert first["traced"] == 1 and first["same"]
    np.testing.assert_allclose(first["y"], want, rtol=1e-6)
    files = list((tmp_path / "c" / "programs").glob("probe-*.jaxexport"))
    assert len(files) == 1
    second = _program_child(env, str(tmp_path / "c"))
    assert second["traced"] == 0 and second["y"] == first["y"]
    files[0].write_bytes(b"not a program")  # damaged: traced again and written anew
    third = _program_child(env, str(tmp_path / "c"))
    assert third["traced"] == 1 and third["y"] == first["y"] and files[0].stat().st_size > 100
    off = _program_child(env, "off")
    assert off["traced"] == 1 and off["y"] == first["y"]


def test_quick_compile_options(monkeypatch):
    """quick_compile_options: XLA:CPU's older fusion emitters on the CPU (this jaxlib knows the option),
    nothing for other platforms or with WUJI_JAX_QUICK_COMPILE=0; an option the jaxlib does not know
    is refused by the probe instead of failing the solver's compilation."""
    from wuji_jax.runtime import cache

    assert cache.quick_compile_options("cpu") == {"xla_cpu_use_fusion_emitters": False}
    assert cache.quick_compile_options("gpu") == {}
    monkeypatch.setenv("WUJI_JAX_QUICK_COMPILE", "0")
    assert cache.quick_compile_options("cpu") == {}
    assert cache.options_accepted((("xla_wuji_no_such_option", True),)) is False


def test_cached_program_hands_its_options_to_xla():
    """cached_program's compiler_options reach XLA (an unknown one fails the call, naming it); the
    quick options give the same values as the defaults, as separate programs."""
    import jax.numpy as jnp
    import numpy as np

    from wuji_jax.runtime.cache import cached_program, quick_compile_options

    def f(x):
        return jnp.sin(x) * 2 + x * x

    x = np.arange(8, dtype=np.float32)
    with pytest.raises(Exception, match="xla_wuji_no_such_option"):
        cached_program(f, "probe_options", x, compiler_options={"xla_wuji_no_such_option": True})(x)
    quick = cached_program(f, "probe_options", x, compiler_options=quick_compile_options("cpu"))
    plain = cached_program(f, "probe_options", x)
    assert quick is not plain
    np.testing.assert_allclose(np.asarray(quick(x)), np.asarray(plain(x)), rtol=1e-6)


@pytest.fixture
def no_solver_programs():
    """No solver program kept in this process, before the test and after it (its fakes go with it):
    ``api.clear_programs``."""
    from wuji_jax.ik import api

    api.clear_programs()
    yield
    api.clear_programs()


def test_small_programs_are_compiled_quickly(monkeypatch, right, no_solver_programs):
    """wj.solve's programs of up to programs.QUICK_FRAMES frames and FrameSolver get
    quick_compile_options (the small ones as two stages side by side); a batch of chunks and a large
    dataset job keep XLA's defaults."""
    import numpy as np

    import wuji_jax as wj
    from wuji_jax import batch
    from wuji_jax.ik import realtime
    from wuji_jax.runtime import programs
    from wuji_jax.ik import api

    class Stop(Exception):
        pass

    seen = {}

    def record(fn, name, *args, compiler_options=None):
        seen[args[1].shape[0]] = name, compiler_options
        raise Stop

    monkeypatch.setattr(api, "cached_program", record)
    monkeypatch.setattr(api, "compile_side_by_side", lambda *calls: [c() for c, _ in calls])
    world = np.load(batch.sample_landmarks_path())["world"].astype(np.float32)
    for frames in (5, 300):
        with pytest.raises(Stop):
            wj.solve(right, world[:frames])
    # 5 frames: padded to 8, two programs (staged_program), the fit (the larger) first
    assert seen == {8: ("solve_chunked_fit", {"xla_cpu_use_fusion_emitters": False}),
                    384: ("solve_batch", None)}
    assert programs.compile_options(programs.QUICK_FRAMES + 1, "cpu") is None

    # FrameSolver compiles with the options it is given: an unknown one fails, naming it
    monkeypatch.setattr(realtime, "compile_options", lambda frames, platform: {"xla_wuji_no_such_option": True})
    frame = np.load(batch.sample_landmarks_path())["world"][0].astype(np.float32)
    with pytest.raises(Exception, match="xla_wuji_no_such_option"):
        wj.FrameSolver(right)(frame)

    cpu = jax.devices("cpu")[:1]
    assert batch.Kernel(api.DEFAULT_CONFIG, cpu, 8, np.float32, quick=True).options == {"xla_cpu_use_fusion_emitters": False}
    assert batch.Kernel(api.DEFAULT_CONFIG, cpu, 8, np.float32).options is None


def test_clear_programs_makes_solve_make_its_programs_again(monkeypatch, right, no_solver_programs):
    """api.clear_programs drops the programs wj.solve keeps in the process (a frame's, and a small
    batch's with its two stages) and says how many: a second call makes none, a call after it makes
    them again. Fake programs: nothing is compiled."""
    import numpy as np

    import wuji_jax as wj
    from wuji_jax import batch
    from wuji_jax.ik import api

    made = []

    def program(fn, name, *args, compiler_options=None):  # cached_program
        made.append(name)
        if name == "solve_chunked_fit":  # the fit stage's result: the padded batch's fields
            return lambda *a: {field: np.arange(8.0) for field in wj.IKResult._fields}
        return lambda *a: name

    monkeypatch.setattr(api, "cached_program", program)
    monkeypatch.setattr(api, "compile_side_by_side", lambda *calls: [c() for c, _ in calls])
    y = np.load(batch.sample_landmarks_path())["world"][:5].astype(np.float32)

    def solve_both():
        assert wj.solve(right, y[0]) == "solve_frame"
        np.testing.assert_array_equal(np.asarray(wj.solve(right, y).angles), np.arange(5.0))  # padding dropped

    solve_both()
    assert sorted(made) == ["solve_chunked_fit", "solve_frame", "solve_start"]
    solve_both()
    assert len(made) == 3  # kept
    assert api.clear_programs() == 4  # the frame's and the batch's programs, the batch's two stages
    assert api.clear_programs() == 0
    solve_both()
    assert sorted(made) == ["solve_chunked_fit"] * 2 + ["solve_frame"] * 2 + ["solve_start"] * 2


@pytest.mark.parametrize("frames, quick", [(100, True), (70_000, False)])
def test_dataset_jobs_are_compiled_quickly_up_to_a_size(tmp_path, monkeypatch, frames, quick):
    """solve_dataset asks for a quickly compiled kernel for jobs of at most QUICK_JOB_FRAMES frames."""
    import numpy as np

    from wuji_jax import batch

    class Stop(Exception):
        pass

    seen = []

    def kernel(*args, quick=False, **more):
        seen.append(quick)
        raise Stop

    monkeypatch.setattr(batch, "Kernel", kernel)
    src = tmp_path / "x.npy"
    np.lib.format.open_memmap(src, mode="w+", dtype=np.float32, shape=(frames, 21, 3)).flush()
    with pytest.raises(Stop):
        batch.solve_dataset(str(src), tmp_path / "out.parquet", side="right", plot=False, progress=False)
    assert seen == [quick] and batch.QUICK_JOB_FRAMES == 65536


def test_programs_compiled_side_by_side_run_without_compiling_again(caplog):
    """compile_side_by_side compiles each program once (in threads; one made when its turn comes) and
    returns the compiled programs, which run without compiling again; an error in one program is
    raised after all finished."""
    import logging

    import jax.numpy as jnp
    import numpy as np

    from wuji_jax.runtime.cache import compile_side_by_side

    def side_a(x):
        return jnp.sin(x) * 3 + 1

    def side_b(x, y):
        return jnp.cos(x) * y - 2

    fa, fb = jax.jit(side_a), jax.jit(side_b)
    x = np.arange(6, dtype=np.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def compiled(names):  # lowered for compilation (the compilation's own log is in its thread)
        return sum(1 for r in caplog.records if r.getMessage().startswith("Compiling jit(")
                   and any(f"jit({n})" in r.getMessage() for n in names))

    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        ca, cb = compile_side_by_side((fa, (spec,)), (lambda: fb, (spec, spec)))
        assert compiled(("side_a", "side_b")) == 2
        np.testing.assert_allclose(np.asarray(cb(x, ca(x))), np.cos(x) * (np.sin(x) * 3 + 1) - 2, atol=1e-5)
        assert compiled(("side_a", "side_b")) == 2
        # (the threads' own log is at their default level; one here would be a compilation on call)
        assert not [r for r in caplog.records if "Finished XLA compilation" in r.getMessage()]

    bad = jax.jit(side_a, compiler_options={"xla_wuji_no_such_option": True})
    with pytest.raises(Exception, match="xla_wuji_no_such_option"):
        compile_side_by_side((jax.jit(side_b), (spec, spec)), (bad, (spec,)))


def test_staged_programs_are_kept_per_structure_shape_and_options(monkeypatch, right, no_solver_programs):
    """staged_program compiles each stage once per argument structure (the config's static coupling
    included), shapes and compiler options, and reuses it otherwise, whatever it is paired with (another
    fit on the same batch compiles only that fit); the fit is made first. A batch on the default device
    and the same batch in numpy share the programs."""
    import numpy as np

    from wuji_jax.ik import api

    made = []

    def fake(*calls):
        made.append([len(args) for _, args in calls])  # the fit takes the start as one more argument
        return [lambda *a, i=i: (i, len(a)) for i in range(len(calls))]

    monkeypatch.setattr(api, "compile_side_by_side", fake)

    def call(frames, coupling="hard", options=None):
        cfg = api.config_arrays(api.DEFAULT_CONFIG.replace(coupling=coupling), np.float32)
        args = (right, np.zeros((frames, 21, 3), np.float32), np.ones((frames, 21), np.float32),
                np.zeros((frames, 20), np.float32), cfg)
        return api.staged_program(api.start_cold, api.fit_chunked, "probe", args, options)(*args)

    assert call(8) == (0, 6)  # the fit (made first) on the arguments and the start's result
    call(8)
    assert made == [[6, 5]]
    call(8, "soft")
    call(16)
    call(8, options={"xla_cpu_use_fusion_emitters": False})
    call(8, "soft")
    assert made == [[6, 5]] * 4
    args = (right, jax.device_put(np.zeros((8, 21, 3), np.float32)), np.ones((8, 21), np.float32),
            np.zeros((8, 20), np.float32), api.config_arrays(api.DEFAULT_CONFIG, np.float32))
    api.staged_program(api.start_cold, api.fit_chunked, "probe", args)(*args)  # on the device: the same
    assert len(made) == 4
    assert api.staged_program(api.start_cold, api.fit_rows, "other", args)(*args) == (0, 6)
    assert made[4:] == [[6]]  # another fit: only it is compiled, the start is kept


def test_the_start_stage_is_kept_as_a_program(tmp_path, monkeypatch, right):
    """The first of the two staged programs returns a Start: jax.export serialises it (registered), so
    cached_program keeps it in the folder instead of falling back to tracing it in every process."""
    import jax.export
    import numpy as np

    from wuji_jax.runtime import cache
    from wuji_jax.ik import api

    monkeypatch.setattr(cache, "compilation_cache_dir", lambda: str(tmp_path))
    cfg = api.config_arrays(api.DEFAULT_CONFIG, np.float32)
    args = (right, np.zeros((4, 21, 3), np.float32), np.ones((4, 21), np.float32), np.zeros((4, 20), np.float32), cfg)
    cache.cached_program(api.start_cold, "probe_start", *args)
    files = list((tmp_path / "programs").glob("probe_start-*.jaxexport"))
    assert len(files) == 1
    exported = jax.export.deserialize(bytearray(files[0].read_bytes()))
    assert exported.out_tree == jax.tree_util.tree_structure(api.start_spec(right, args[1], cfg))
