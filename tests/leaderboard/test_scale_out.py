"""Scale-out: workers, Ray, shards and merge give the plain sweep's rows; failures are rows."""

import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from neural_testbed import leaderboard
from neural_testbed.agents import plugins, registry
from neural_testbed.leaderboard import store as store_lib

HERE = pathlib.Path(__file__).parent
TOY, BROKEN = str(HERE / "toy_agent.py"), str(HERE / "broken_agent.py")
PROBLEMS = list(leaderboard.get_sweep("smoke").values())
RESULT = ("agent", "config_hash", "problem_id", "tau", "kl", "kl_stderr", "accuracy", "ece",
          "status", "error")


@pytest.fixture(scope="module", autouse=True)
def user_agents():
    for path in (TOY, BROKEN):
        plugins.import_agent_module(path)


def _sweep(path, **kwargs):
    with leaderboard.ResultsStore(path) as store:
        summary = leaderboard.run_sweep("toy", registry.get_agent("toy").sweep(), PROBLEMS, store,
                                        imports=(TOY,), progress=False, **kwargs)
        return summary, [tuple(r[c] for c in RESULT) for r in store.rows()]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    summary, rows = _sweep(tmp_path_factory.mktemp("plain") / "plain.db")
    assert summary.computed == len(rows) == 16 and summary.failed == 0
    return rows


def test_two_local_workers_give_the_plain_rows(plain, tmp_path):
    assert _sweep(tmp_path / "w.db", workers=2)[1] == plain


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
        assert [tuple(r[c] for c in RESULT) for r in merged.rows()] == plain


def test_merge_refuses_a_conflicting_row_and_names_it(tmp_path):
    with leaderboard.ResultsStore(tmp_path / "a.db") as a:
        rows = [_fake_row("classification_2d/90", 0.5)]
        a.merge(rows)
        with pytest.raises(store_lib.StoreError,
                           match=r"1 row\(s\) conflict .*problem_id=classification_2d/90, tau=1"):
            a.merge([_fake_row("classification_2d/90", 0.7)])
        assert len(a.rows()) == 1 and a.rows()[0]["kl"] == 0.5


def _fake_row(pid, kl):
    values = dict.fromkeys(store_lib.COLUMNS, 0)
    values.update(agent="mlp", config_hash="h", config="{}", problem_id=pid, tau=1,
                  estimator="auto", kl=kl, status="ok", error="", version="0", timestamp="t")
    return values


def test_broken_agent_gets_failed_rows_and_retry_touches_only_them(tmp_path):
    paper = leaderboard.get_sweep("paper")
    problems = [dataclasses.replace(paper[f"classification_2d/{i}"], num_test=50, num_samples=20)
                for i in (80, 90, 110, 160, 91)]  # T=3; T=10; T=100; temp 0.5; T=10
    config = registry.get_agent("broken").default
    with leaderboard.ResultsStore(tmp_path / "b.db") as store:
        summary = leaderboard.run_sweep("broken", [config], problems, store, progress=False)
        rows = {(r["problem_id"], r["tau"]): r for r in store.rows()}
        assert summary.computed == 10 and summary.failed == 6
        errors = {pid: rows[(pid, 1)]["error"] for pid, _ in rows}
        assert "deliberate failure on T = 3" in errors["classification_2d/80"]
        assert "agent returned logits of shape (" in errors["classification_2d/110"]
        assert "NaN or +inf logits" in errors["classification_2d/160"]
        for pid in ("classification_2d/90", "classification_2d/91"):
            assert rows[(pid, 1)]["status"] == rows[(pid, 100)]["status"] == "ok"
        time.sleep(1.1)  # timestamps have one-second resolution
        again = leaderboard.run_sweep("broken", [config], problems, store, progress=False,
                                      retry_failed=True)
        assert (again.computed, again.reused) == (6, 4)
        after = {(r["problem_id"], r["tau"]): r for r in store.rows()}
        assert all(after[k]["timestamp"] == rows[k]["timestamp"]
                   for k in rows if rows[k]["status"] == "ok")
        assert all(after[k]["timestamp"] != rows[k]["timestamp"]
                   for k in rows if rows[k]["status"] == "failed")


def test_ray_backend_survives_a_killed_worker_and_gives_the_plain_rows(plain, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'neural-testbed[ray]')")
    psutil = pytest.importorskip("psutil")
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1]))
    db = tmp_path / "ray.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "neural_testbed.cli", "sweep", "--agent", "toy", "--import", TOY,
         "--sweep", "smoke", "--db", str(db), "--backend", "ray", "--workers", "2", "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.time() + 300
    while killed is None and proc.poll() is None and time.time() < deadline:
        for p in psutil.Process(proc.pid).children(recursive=True) + _ray_workers(psutil):
            try:
                if "_ray_task" in " ".join(p.cmdline()) or p.name().startswith("ray::_ray_task"):
                    p.send_signal(signal.SIGKILL)
                    killed = p.pid
                    break
            except psutil.Error:
                continue
        time.sleep(0.2)
    out, err = proc.communicate(timeout=600)
    assert killed is not None, "no Ray worker was seen running a task"
    assert proc.returncode == 0, err
    with leaderboard.ResultsStore(db) as store:
        assert [tuple(r[c] for c in RESULT) for r in store.rows()] == plain


def _ray_workers(psutil):
    workers = []
    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith("ray::"):
            workers.append(p)
    return workers
