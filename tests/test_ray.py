"""wuji_jax.pipeline.ray_cluster: the dataset table solved on a Ray cluster equals solve_dataset's.

One local cluster (``ray.init(num_cpus=2)``) serves the library tests; a two-node cluster on localhost
(``ray start --head`` + ``ray start --address``, one CPU each, in their own sessions, stopped by
signalling those sessions) serves the command-line test. Every run uses chunks of 64, blocks of 128
frames and 5 LM iterations, and the single-machine reference the same on as many CPU devices as a
worker holds (one, or two where the local cluster's default worker takes both CPUs), so the tables
must be equal value for value. The workers share one compilation cache folder: only the first worker
compiles.
"""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import wuji_jax.data.io as wio
from wuji_jax.pipeline.batch import sample_landmarks_path, solve_dataset
from wuji_jax.cli import main

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")
# Ray's own warnings (its deprecations, open files at shutdown) and JAX's warning when Ray forks a
# helper process from this (JAX-using) process are Ray's business, not what these tests check
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

SETTINGS = dict(chunk_size=64, iterations=5, plot=False)
GOOD_FRAMES = 300 + 150 + 50
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Inputs (npy split in three blocks, parquet in two, csv in one, a corrupt npy) and the
    single-machine reference table; the two-device reference (:func:`ref2`) is started in a child
    process first, so that it is solved while this process solves the one-device one."""
    d = tmp_path_factory.mktemp("ray_inputs")
    world = wio.load_landmarks(sample_landmarks_path()).world
    np.save(d / "a.npy", world[:300])
    (d / "bad.npy").write_bytes(b"\x93NUMPY not really")
    wio.write_landmarks(d / "b.parquet", world[300:450], timestamps=np.arange(150) / 30.0)
    wio.write_landmarks(d / "c.csv", world[450:500])
    files = [str(d / n) for n in ("a.npy", "bad.npy", "b.parquet", "c.csv")]
    # the suite's compilation cache (tests/conftest.py), where this process may have left the program
    cache = os.environ.get("WUJI_JAX_TEST_XLA_CACHE") or str(tmp_path_factory.mktemp("xla"))
    ref2 = _start_ref2(files, d / "reference2.parquet", cache)
    try:
        ref = d / "reference.parquet"
        summary = solve_dataset(files, ref, devices=1, on_error="skip", progress=False, **SETTINGS)
        yield {"files": files, "ref": ref, "summary": summary, "cache": cache, "ref2": ref2}
    finally:
        if ref2["proc"].poll() is None:
            ref2["proc"].kill()
        ref2["proc"].communicate()


def _start_ref2(files: list[str], out: Path, cache: str) -> dict:
    """Start ``solve_dataset(files, out, devices=2)`` in a child process of two CPU devices (its program
    left in the workers' cache folder)."""
    code = ("import json, sys, wuji_jax as wj\n"
            "from wuji_jax.pipeline.batch import solve_dataset\n"
            "wj.enable_compilation_cache(sys.argv[1])\n"
            "s = solve_dataset(json.loads(sys.argv[2]), sys.argv[3], devices=2, on_error='skip', progress=False,\n"
            "                  chunk_size=64, iterations=5, plot=False)\n"
            "print(json.dumps(s))")
    import jax

    env = dict(os.environ, JAX_NUM_CPU_DEVICES="2", JAX_PLATFORMS="cpu", WUJI_JAX_NO_CACHE="0",
               JAX_ENABLE_X64="1" if jax.config.jax_enable_x64 else "0",  # the dtype of this process's runs
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", code, cache, json.dumps(files), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return {"proc": proc, "out": out}


@pytest.fixture(scope="module")
def ref2(data):
    """The reference on two CPU devices (``solve_dataset(devices=2)``), from the child process
    :func:`data` started."""
    proc = data["ref2"]["proc"]
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    return {"ref": data["ref2"]["out"], "summary": json.loads(stdout.strip().splitlines()[-1])}


@pytest.fixture(scope="module")
def cluster():
    import ray

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # localhost only: no token file in the home folder
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


def _same_table(a, b):
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema.equals(tb.schema, check_metadata=True)
    assert ta.num_rows == tb.num_rows
    for name in ta.column_names:  # bit for bit (NaN timestamps included)
        x, y = (t[name].to_numpy(zero_copy_only=False) for t in (ta, tb))
        if x.dtype.kind == "f":
            x, y = x.view(f"i{x.itemsize}"), y.view(f"i{y.itemsize}")
        assert np.array_equal(x, y), name


def _same_summary(s, ref):
    for k in ("frames", "flagged", "valid", "flag_counts", "residual_mm_mean", "residual_mm_median", "files",
              "errors", "notes", "batch_size", "chunk_size", "iterations"):
        assert s[k] == ref[k], k
    assert set(ref) <= set(s)


def _solve(cluster, data, out, **kw):
    from wuji_jax.pipeline.ray_cluster import solve_dataset_ray

    kw.setdefault("cpus_per_worker", 1)  # two workers of one CPU device: the one-device reference
    return solve_dataset_ray(data["files"], out, block_size=128, progress=False,
                             compilation_cache=data["cache"], **SETTINGS, **kw)


@needs_ray
def test_ray_table_equals_solve_dataset(cluster, data, ref2, tmp_path):
    """By default a worker holds a node's CPUs (here one worker, both CPUs as two JAX devices): the
    table equals solve_dataset's on two devices, bit for bit."""
    out = tmp_path / "angles.parquet"
    s = _solve(cluster, data, out, cpus_per_worker=None)
    _same_table(out, ref2["ref"])
    _same_summary(s, ref2["summary"])
    assert len(s["errors"]) == 1 and s["errors"][0].startswith(data["files"][1])
    assert s["solved_frames"] == GOOD_FRAMES and s["resumed_frames"] == 0
    assert s["ray"]["blocks"] == 3 + 1 + 2 + 1 and s["ray"]["nodes"] == 1
    assert s["ray"]["workers"] == 1 and s["ray"]["cpus_per_worker"] == 2
    assert len(s["devices"]) == 1 and s["devices"][0].endswith("cpu:0,cpu:1")
    on_disk = json.loads((tmp_path / "angles_summary.json").read_text())
    assert on_disk["errors"] == s["errors"] and on_disk["frames"] == GOOD_FRAMES
    assert not (tmp_path / "angles.parquet.parts").exists()


@needs_ray
def test_a_fresh_run_of_known_size_writes_its_table_as_blocks_arrive(cluster, data, tmp_path, monkeypatch):
    """Inputs whose frame counts are known (npy, parquet): the driver writes the table block by block in
    input order while the two workers solve (blocks that finish early wait in their part files), and
    nothing is assembled afterwards; the table equals solve_dataset's bit for bit."""
    from wuji_jax.pipeline import table

    files = [data["files"][0], data["files"][2]]  # 3 + 2 blocks of 128 frames
    ref = tmp_path / "reference.parquet"
    solve_dataset(files, ref, devices=1, progress=False, **SETTINGS)
    assembled = []
    real = table.assemble_parts
    monkeypatch.setattr(table, "assemble_parts", lambda out, *a: assembled.append(out) or real(out, *a))
    out = tmp_path / "angles.parquet"
    s = _solve(cluster, {**data, "files": files}, out)
    assert assembled == [] and s["frames"] == 450 and s["ray"]["workers"] == 2
    _same_table(out, ref)


@needs_ray
def test_worker_killed_mid_job_gives_identical_output_and_a_resume_solves_only_the_missing_blocks(cluster, data,
                                                                                                   tmp_path,
                                                                                                   monkeypatch):
    """A worker dies mid-job (os._exit after solving a chunk, by the driver's test hook
    ``WUJI_JAX_RAY_CRASH_ONCE``): Ray retries its block and the table is identical. Then, as if a run had
    died before one block: the rerun solves that block only and writes the same bytes."""
    from wuji_jax.pipeline.ray_cluster import CRASH_ONCE_ENV

    marker = tmp_path / "crashed"
    out = tmp_path / "angles.parquet"
    monkeypatch.setenv(CRASH_ONCE_ENV, str(marker))
    first = _solve(cluster, data, out, keep_parts=True)
    monkeypatch.delenv(CRASH_ONCE_ENV)
    assert marker.exists()  # a worker did die; Ray retried its block
    _same_table(out, data["ref"])
    _same_summary(first, data["summary"])
    table = out.read_bytes()
    parts = sorted((tmp_path / "angles.parquet.parts").glob("chunk_*.npz"))
    assert len(parts) == 3 + 2 + 1
    parts[1].unlink()  # a.npy's second block (frames 128-255): as if the run had died before it
    out.unlink()
    again = _solve(cluster, data, out)
    assert again["solved_frames"] == 128 and again["resumed_frames"] == GOOD_FRAMES - 128
    assert out.read_bytes() == table
    assert again["errors"] == first["errors"]  # the bad file's error was recorded, not read again


@needs_ray
def test_failed_run_resumes_to_identical_output(cluster, data, tmp_path):
    out = tmp_path / "angles.parquet"
    with pytest.raises(ValueError, match="bad.npy"):
        _solve(cluster, data, out, on_error="raise")
    s = _solve(cluster, data, out)
    assert s["solved_frames"] + s["resumed_frames"] == GOOD_FRAMES
    _same_table(out, data["ref"])


# ----------------------------------------------------------------------------- the command line


def _free_ports(n: int) -> list[int]:
    """``n`` different free ports: all bound at once before any is released (one at a time, the
    system may hand the same port out twice, and Ray refuses two components on one port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_ports(ports: list[int]) -> list[str]:
    """A node's own ports, from six of :func:`_free_ports`."""
    names = ("node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc", "metrics-export",
             "runtime-env-agent")
    return [f"--{name}-port={port}" for name, port in zip(names, ports, strict=True)]


def _stop_session(p: subprocess.Popen) -> None:
    """Stop a ``ray start --block`` started in its own session, and everything it started (by the
    session id: `ray stop` would stop every Ray on the machine)."""
    try:  # nothing of a test cluster needs a graceful stop (its temp folder is removed after)
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=30)
    for proc in Path("/proc").iterdir() if Path("/proc").is_dir() else ():  # workers: own groups, same session
        try:
            if proc.name.isdigit() and os.getsid(int(proc.name)) == p.pid:
                os.kill(int(proc.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _node_ip() -> str:
    """This machine's outward IP, found as Ray finds it (the route a UDP socket would take; nothing is
    sent), or 127.0.0.1 without a route. Ray 2.40 turns a 127.0.0.1 cluster address into this IP in
    ``ray.init`` and then cannot reach a head bound to 127.0.0.1, so the nodes use it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("8.8.8.8", 53))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _wait_for_port(host: str, port: int, head: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if head.poll() is not None:
            pytest.fail(f"ray start --head exited: {log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"ray start --head did not listen on {port}: {log.read_text()[-3000:]}")


@pytest.fixture
def two_nodes(tmp_path, data):
    """A head and a worker node on this machine (at its outward IP, see _node_ip), one CPU each; yields
    (address, environment)."""
    import shutil
    import tempfile

    ray_bin = str(Path(sys.executable).with_name("ray"))
    env = dict(os.environ, RAY_AUTH_MODE="disabled", WUJI_JAX_NO_CACHE="0", WUJI_JAX_CACHE_DIR=data["cache"],
               JAX_ENABLE_X64="1", PYTHONPATH=str(ROOT))
    ports = _free_ports(14)  # the head's, its dashboard's, then six for each node, all different
    port, host = ports[0], _node_ip()
    address = f"{host}:{port}"
    temp = tempfile.mkdtemp(prefix="wjray", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    common = ["--num-cpus=1", "--block", "--disable-usage-stats", f"--node-ip-address={host}"]
    procs = []
    try:
        procs.append(subprocess.Popen(
            [ray_bin, "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false",
             f"--dashboard-port={ports[1]}", *common, *_node_ports(ports[2:8])],
            env=env, start_new_session=True, stdout=open(tmp_path / "head.log", "w"), stderr=subprocess.STDOUT))
        _wait_for_port(host, port, procs[0], tmp_path / "head.log")
        procs.append(subprocess.Popen(
            [ray_bin, "start", f"--address={address}", *common, *_node_ports(ports[8:14])],
            env=env, start_new_session=True, stdout=open(tmp_path / "node.log", "w"), stderr=subprocess.STDOUT))
        check = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
                 "print(sum(n['Alive'] for n in ray.nodes()))")
        for _ in range(30):
            r = subprocess.run([sys.executable, "-c", check, address], env=env, capture_output=True, text=True,
                               timeout=120)
            if r.stdout.strip() == "2":
                break
            time.sleep(1)
        else:
            pytest.fail(f"the second node did not join: {(tmp_path / 'node.log').read_text()[-3000:]}")
        yield address, env
    finally:
        for p in reversed(procs):
            _stop_session(p)
        shutil.rmtree(temp, ignore_errors=True)


@needs_ray
def test_cli_on_a_two_node_cluster(two_nodes, data, tmp_path):
    address, env = two_nodes
    out = tmp_path / "angles.parquet"
    r = subprocess.run([sys.executable, "-m", "wuji_jax", "solve", *data["files"], "-o", str(out),
                        "--chunk-size", "64", "--iterations", "5", "--no-plot", "--quiet", f"--ray={address}"],
                       env=env, capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]  # the corrupt file: reported, the rest solved
    skipped = [line for line in r.stderr.splitlines() if line.startswith("wuji-jax: error:")]
    assert len(skipped) == 1 and "bad.npy" in skipped[0] and skipped[0].endswith("(skipped)")
    for chatter in ("Connecting to existing Ray cluster", "Starting execution of Dataset", "Progress bars disabled",
                    "execution finished"):  # --quiet: Ray's own info lines are not shown
        assert chatter not in r.stderr, r.stderr[-3000:]
    _same_table(out, data["ref"])
    s = json.loads((tmp_path / "angles_summary.json").read_text())
    _same_summary(s, data["summary"])
    assert s["ray"]["nodes"] == 2 and s["ray"]["workers"] == 2


def test_cli_without_ray_says_how_to_install(tmp_path):
    fake = tmp_path / "no_ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "wuji_jax", "solve", str(sample_landmarks_path()), "-o",
                        str(tmp_path / "o.parquet"), "--ray"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'wuji-jax[ray]'" in lines[0], r.stderr
    assert not (tmp_path / "o.parquet").exists()


@needs_ray
def test_cli_ray_refuses_an_input_file_as_its_address(tmp_path, capsys):
    assert main(["solve", "--ray", str(sample_landmarks_path()), "-o", str(tmp_path / "o.parquet")]) == 2
    assert "--ray=ADDRESS" in capsys.readouterr().err


def test_cli_cpus_per_worker_needs_ray(tmp_path, capsys):
    assert main(["solve", str(sample_landmarks_path()), "-o", str(tmp_path / "o.parquet"),
                 "--cpus-per-worker", "2"]) == 2
    assert "only with --ray" in capsys.readouterr().err
    assert main(["solve", str(sample_landmarks_path()), "-o", str(tmp_path / "o.parquet"), "--cpus-per-worker",
                 "0", "--ray=auto"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()
