"""Scale-out: workers, Ray, shards and merge give the plain sweep's rows; failures are rows."""

import dataclasses
import functools
import ipaddress
import itertools
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from neural_testbed import leaderboard
from neural_testbed.agents import plugins, registry
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import options as run_options
from neural_testbed.run import programs

HERE = pathlib.Path(__file__).parent
TOY, BROKEN = str(HERE / "toy_agent.py"), str(HERE / "broken_agent.py")
DYING = str(HERE / "dying_agent.py")
# The smoke sweep at N = M = 100: executors, shards and merge are under test, not the estimates.
PROBLEMS = [dataclasses.replace(p, num_test=100, num_samples=100)
            for p in leaderboard.get_sweep("smoke").values()]
RESULT = ("agent", "config_hash", "problem_id", "tau", "kl", "kl_stderr", "accuracy", "ece",
          "status", "error")


@pytest.fixture(scope="module", autouse=True)
def user_agents():
    """Registers "toy", "broken" and "dying" for this module's tests only, then removes them.

    A module imported earlier in the session is not executed again, so its spec
    is registered here if importing it did not."""
    agents_before, modules_before = set(registry.AGENTS), set(sys.modules)
    for name, path in (("toy", TOY), ("broken", BROKEN), ("dying", DYING)):
        module = plugins.import_agent_module(path)
        if name not in registry.AGENTS:
            registry.register(name, module.SPEC)
    yield
    for name in set(registry.AGENTS) - agents_before:
        registry.unregister(name)
    for module in ({"toy_agent", "broken_agent"} - modules_before):
        sys.modules.pop(module, None)


def _sweep(path, problems=PROBLEMS, **kwargs):
    with leaderboard.ResultsStore(path) as store:
        summary = leaderboard.run_sweep("toy", registry.get_agent("toy").sweep(), problems, store,
                                        imports=(TOY,), progress=False, **kwargs)
        return summary, [tuple(getattr(r, c) for c in RESULT) for r in store.rows()]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    summary, rows = _sweep(tmp_path_factory.mktemp("plain") / "plain.db")
    assert summary.computed == len(rows) == 16 and summary.failed == 0
    return rows


@pytest.mark.slow
def test_two_local_workers_give_the_plain_rows(plain, tmp_path):
    assert _sweep(tmp_path / "w.db", workers=2)[1] == plain


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_units_at_once_run_side_by_side_and_give_the_plain_rows(plain, tmp_path, monkeypatch):
    """Two units at once in this process: the first two meet at a barrier, which only two
    units in flight at the same time can pass (one at a time, it times out and the sweep
    raises); the rows are the serial run's."""
    barrier, calls, threads = threading.Barrier(2, timeout=120), itertools.count(), set()
    compute = programs.compute_unit

    def side_by_side(unit, run_programs, build=None):
        threads.add(threading.current_thread().name)
        if next(calls) < 2:
            barrier.wait()
        return compute(unit, run_programs, build)

    monkeypatch.setattr(programs, "compute_unit", side_by_side)
    assert _sweep(tmp_path / "t.db", units_at_once=2)[1] == plain
    assert len(threads) == 2 and all(t.startswith("neural-testbed-unit") for t in threads)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_host_agent_computes_units_at_once_with_the_serial_numbers():
    """random_forest keeps its forests in its runner between training and evaluation: two
    units of one shape at once take turns there and give the serial rows. (Without the
    turns, one unit's end clears the other's forests: failed rows in most runs of this.)"""
    pytest.importorskip("sklearn")
    spec = registry.get_agent("random_forest")
    build = functools.partial(spec.make, dataclasses.replace(spec.default, num_trees=10))
    problems = [dataclasses.replace(p, num_test=50, num_samples=50)
                for p in leaderboard.get_sweep("paper").values()
                if p.num_train == 10 and p.temperature == 0.1]  # 10 seeds: 10 units
    assert len(problems) == 10

    def rows(units_at_once):
        return [(r.problem_id, r.tau, r.kl, r.status) for r in leaderboard.run_agent(
            build, problems, "random_forest", problems_per_batch=1, progress=False,
            units_at_once=units_at_once)]

    serial = rows(1)
    assert {r[3] for r in serial} == {"ok"} and rows(2) == serial


@pytest.mark.slow  # three worker processes die and start again
def test_a_unit_whose_worker_dies_three_times_gets_failed_rows_and_the_rest_run(tmp_path):
    """A worker killed while computing a unit is replaced and the unit tried again; after
    the third death its rows are failed rows that say so, and every other unit's rows
    are computed (T = 100 in another worker, meanwhile)."""
    with leaderboard.ResultsStore(tmp_path / "d.db") as store:
        summary = leaderboard.run_sweep("dying", [registry.get_agent("dying").default],
                                        PROBLEMS, store, workers=2, imports=(DYING,),
                                        progress=False)
        rows = store.rows()
    assert summary.computed == len(rows) == 8
    failed = {r.problem_id for r in rows if r.status == "failed"}
    assert failed == {p.problem_id for p in PROBLEMS if p.num_train == 10}
    assert all("the worker process died 3 times" in r.error for r in rows if r.status != "ok")


@pytest.mark.parametrize("kwargs, message", [
    ({"units_at_once": 0}, r"units at once \(--units-at-once\) must be an integer >= 1, got 0"),
    ({"units_at_once": 2, "workers": 2}, "--units-at-once applies to a run in this process"),
])
def test_bad_units_at_once_is_refused_before_anything_runs(tmp_path, kwargs, message):
    with leaderboard.ResultsStore(tmp_path / "x.db") as store:
        with pytest.raises(ValueError, match=message):
            leaderboard.run_sweep("toy", registry.get_agent("toy").sweep(), PROBLEMS, store,
                                  progress=False, **kwargs)
        assert store.rows() == []


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_shards_merged_give_the_plain_rows(plain, tmp_path):
    computed = 0
    for i in (1, 2):
        summary, _ = _sweep(tmp_path / f"s{i}.db", shard=(i, 2))
        computed += summary.computed
    assert computed == 16  # the shares are disjoint and cover the sweep
    with leaderboard.ResultsStore(tmp_path / "all.db") as merged:
        for i in (1, 2):
            with leaderboard.ResultsStore(tmp_path / f"s{i}.db") as shard:
                assert merged.merge(shard.rows())[0] == 8
        # Merging a shard again only finds exact duplicates.
        with leaderboard.ResultsStore(tmp_path / "s1.db") as shard:
            assert merged.merge(shard.rows()) == (0, 8)
        assert [tuple(getattr(r, c) for c in RESULT) for r in merged.rows()] == plain


def test_merge_refuses_a_conflicting_row_and_names_it(tmp_path):
    with leaderboard.ResultsStore(tmp_path / "a.db") as a:
        rows = [_fake_row("classification_2d/90", 0.5)]
        a.merge(rows)
        with pytest.raises(store_lib.StoreError,
                           match=r"1 row\(s\) conflict .*problem_id=classification_2d/90, problem_hash=p, tau=1"):
            a.merge([_fake_row("classification_2d/90", 0.7)])
        assert len(a.rows()) == 1 and a.rows()[0].kl == 0.5


def _fake_row(pid, kl):
    values = dict.fromkeys(store_lib.COLUMNS, 0)
    values.update(agent="mlp", config_hash="h", config="{}", problem_id=pid, problem_hash="p", tau=1,
                  target="classification", estimator="auto", metric="kl", kl=kl, nll=None,
                  nll_stderr=None, status="ok", error="", version="0", timestamp="t")
    return store_lib.StoredRow(**values)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_broken_agent_gets_failed_rows_and_retry_touches_only_them(tmp_path, monkeypatch):
    paper = leaderboard.get_sweep("paper")
    problems = [dataclasses.replace(paper[f"classification_2d/{i}"], num_test=50, num_samples=20)
                for i in (80, 90, 110, 160, 91)]  # T=3; T=10; T=100; temp 0.5; T=10
    config = registry.get_agent("broken").default
    with leaderboard.ResultsStore(tmp_path / "b.db") as store:
        summary = leaderboard.run_sweep("broken", [config], problems, store, progress=False)
        rows = {(r.problem_id, r.tau): r for r in store.rows()}
        assert summary.computed == 10 and summary.failed == 6
        errors = {pid: rows[(pid, 1)].error for pid, _ in rows}
        assert "deliberate failure on T = 3" in errors["classification_2d/80"]
        assert "agent returned logits of shape (" in errors["classification_2d/110"]
        assert "NaN or +inf logits" in errors["classification_2d/160"]
        for pid in ("classification_2d/90", "classification_2d/91"):
            assert rows[(pid, 1)].status == rows[(pid, 100)].status == "ok"
        # Record what the retry writes, rather than compare one-second timestamps.
        written, write = [], store.write

        def recording_write(results):
            results = list(results)
            written.extend((r.problem_id, r.tau) for r in results)
            write(results)

        monkeypatch.setattr(store, "write", recording_write)
        again = leaderboard.run_sweep("broken", [config], problems, store, progress=False,
                                      retry_failed=True)
        assert (again.computed, again.reused) == (6, 4)
        assert sorted(written) == sorted(k for k in rows if rows[k].status == "failed")
        after = {(r.problem_id, r.tau): r for r in store.rows()}
        assert all(after[k] == rows[k] for k in rows if rows[k].status == "ok")


@pytest.mark.slow
def test_ray_backend_listens_on_loopback_only_survives_a_killed_worker_and_gives_the_plain_rows(
        tmp_path):
    """One local Ray cluster (started by the command, as a user's is) for two checks: every
    socket its processes listen on is loopback, and a worker SIGKILLed mid-task is restarted
    by Ray and its unit retried, so the rows are the plain run's."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'neural-testbed[ray]')")
    psutil = pytest.importorskip("psutil")
    # The command runs two smoke problems of one shape (one work unit) at full size (taus 1
    # and 2: a fraction of the evaluation), so the plain rows are of them too.
    pids = ["classification_2d/90", "classification_2d/91"]
    smoke = leaderboard.get_sweep("smoke")
    plain = _sweep(tmp_path / "plain.db", [dataclasses.replace(smoke[pid], taus=(1, 2))
                                           for pid in pids])[1]
    # Every process of this run inherits the marker, so the test never touches
    # another run's Ray workers on a shared machine.
    marker = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1]), NEURAL_TESTBED_TEST_RUN=marker)
    env.pop("RAY_ADDRESS", None)  # a local cluster, started by the command
    db = tmp_path / "ray.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "neural_testbed.cli", "sweep", "--agent", "toy", "--import", TOY,
         "--sweep", "smoke", "--problems", *pids, "--taus", "1,2", "--db", str(db),
         "--backend", "ray", "--workers",
         "1", "--quiet"],  # one actor: killed, restarted by Ray, and its unit retried
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    killed, seen = None, {}  # seen: process -> the "ip:port"s it listened on
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            _note_listeners(psutil, proc.pid, seen)
            if killed is None:
                killed = _kill_a_task_worker(psutil, proc.pid, marker)
            time.sleep(0.1)  # polling interval, not a wait for an event
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert killed is not None, "no Ray worker was seen running a task"
    assert proc.returncode == 0, err
    with leaderboard.ResultsStore(db) as store:
        assert [tuple(getattr(r, c) for c in RESULT) for r in store.rows()] == plain
    listeners = "\n".join(f"{name} -> {sorted(addresses)}" for name, addresses in seen.items())
    # Not vacuous: the cluster's servers and a worker that ran units were seen listening.
    for name in ("gcs_server", "raylet", "ray::"):
        assert name in listeners, listeners
    exposed = {name: sorted(a for a in addresses if not _is_loopback(a.rsplit(":", 1)[0]))
               for name, addresses in seen.items()}
    exposed = {name: addresses for name, addresses in exposed.items() if addresses}
    assert not exposed, f"listening beyond loopback: {exposed}\nall listeners:\n{listeners}"


def _note_listeners(psutil, driver_pid: int, seen: dict[str, set[str]]) -> None:
    """Adds to ``seen`` the listening TCP sockets and unconnected UDP sockets of the driver
    and every process under it (the GCS server, the raylet, agents, workers)."""
    try:
        root = psutil.Process(driver_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
            label = f"{process.pid} {process.name()}: {' '.join(process.cmdline())[:100]}"
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        for c in connections:
            if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr):
                seen.setdefault(label, set()).add(f"{c.laddr.ip}:{c.laddr.port}")


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    if address.version == 6 and address.ipv4_mapped is not None:  # ::ffff:127.0.0.1
        address = address.ipv4_mapped
    return address.is_loopback


def _kill_a_task_worker(psutil, driver_pid: int, marker: str) -> int | None:
    """SIGKILLs one Ray worker of this run that is running a task; returns its pid."""
    candidates = psutil.Process(driver_pid).children(recursive=True)
    candidates += [p for p in psutil.process_iter(["name"])
                   if (p.info["name"] or "").startswith("ray::")]
    for p in candidates:
        try:
            # An actor's process is named after the method it runs.
            running_task = ("_Worker.compute" in " ".join(p.cmdline())
                            or p.name().startswith("ray::_Worker.compute"))
            if running_task and p.environ().get("NEURAL_TESTBED_TEST_RUN") == marker:
                p.send_signal(signal.SIGKILL)
                return p.pid
        except psutil.Error:
            continue
    return None


def test_two_units_at_once_on_a_cpu_of_two_or_more_cores_else_one(monkeypatch):
    import jax

    for cores, backend, expected in [({0}, "cpu", 1), ({0, 1}, "cpu", 2),
                                     (set(range(16)), "cpu", 2), ({0, 1}, "gpu", 1)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cores=cores: cores,
                            raising=False)
        monkeypatch.setattr(jax, "default_backend", lambda backend=backend: backend)
        assert run_options.default_units_at_once(run_options.RunOptions()) == expected, (
            cores, backend)
