"""Sweeps through the real command: killed and resumed, a user agent, bad stores."""

import os
import pathlib
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TOY = str(pathlib.Path(__file__).with_name("toy_agent.py"))
SWEEP = ["sweep", "--agent", "toy", "--import", TOY, "--sweep", "smoke", "--problems-per-batch", "1",
         "--quiet"]
TOTAL_ROWS = 2 * 4 * 2  # configs x problems x taus
COMPARED = ("agent", "config_hash", "problem_id", "tau", "kl", "kl_stderr", "accuracy", "ece",
            "status")


def _cli(args, cwd, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "neural_testbed.cli", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def _run(args, cwd, timeout=600):
    proc = _cli(args, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def _count(db):
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error:
        return 0


def _rows(db):
    with sqlite3.connect(db) as conn:
        cursor = conn.execute(f"SELECT {', '.join(COMPARED)} FROM results ORDER BY "
                              "agent, config_hash, problem_id, tau")
        return cursor.fetchall()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A store with an uninterrupted toy sweep and a short mlp run."""
    path = tmp_path_factory.mktemp("sweep")
    status, out, err = _run(SWEEP + ["--db", "ref.db"], path)
    assert status == 0, err
    assert f"{TOTAL_ROWS} rows computed, 0 reused" in out
    # The sweep ends with its configs ranked: both, on all 4 problems, lowest kl_agg first.
    ranking = out[out.index("toy's configs on smoke, best first"):].splitlines()
    header, *ranked = ranking[1:4]
    columns = header.split()
    assert columns[:5] == ["rank", "kl_1", "kl_100", "kl_agg", "problems"], header
    values = [line.split() for line in ranked]
    assert [v[0] for v in values] == ["1", "2"] and all(v[4] == "4" for v in values)
    assert float(values[0][3]) <= float(values[1][3])
    status, _, err = _run(["run", "--agent", "mlp", "--sweep", "smoke", "--set", "num_steps=30",
                           "--db", "ref.db", "--quiet"], path)
    assert status == 0, err
    return path


@pytest.mark.slow  # SIGKILL and one more run of the sweep
def test_killed_sweep_resumes_with_exactly_the_uninterrupted_rows(workdir):
    proc = _cli(SWEEP + ["--db", "killed.db"], workdir)
    deadline = time.time() + 300
    while _count(workdir / "killed.db") < 4 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = _count(workdir / "killed.db")
    assert 0 < at_kill < TOTAL_ROWS, at_kill  # really killed mid-way
    status, out, err = _run(SWEEP + ["--db", "killed.db"], workdir)
    assert status == 0, err
    assert f"{TOTAL_ROWS - at_kill} rows computed, {at_kill} reused" in out
    reference = [r for r in _rows(workdir / "ref.db") if r[0] == "toy"]
    assert _rows(workdir / "killed.db") == reference  # (a run with nothing left: test_cli.py)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_registered_agent_goes_through_leaderboard_and_compare(workdir):
    status, out, err = _run(["leaderboard", "--import", TOY, "--sweep", "smoke", "--db",
                             "ref.db", "--format", "csv"], workdir)
    assert status == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("agent,source,kl_1,kl_1_stderr,kl_1_norm,kl_1_norm_stderr,kl_100")
    assert {line.split(",")[0] for line in lines[1:]} == {"toy", "mlp"}
    status, out, err = _run(["leaderboard", "--sweep", "smoke", "--db", "ref.db",
                             "--tuning", "per-setting", "--format", "markdown"], workdir)
    assert status == 0 and out.startswith("| agent |"), err
    status, out, err = _run(["compare", "--import", TOY, "--agent", "toy", "--baseline", "mlp",
                             "--sweep", "smoke", "--db", "ref.db"], workdir)
    assert status == 0, err
    assert re.search(r"toy vs mlp: significantly better in \d+, worse in \d+ of 4", out)


@pytest.mark.parametrize(
    "args, message",
    [(["leaderboard", "--db", "missing.db"], "no results store at 'missing.db'"),
     (["leaderboard", "--db", "corrupt.db"], "is not a usable neural-testbed results store"),
     (["leaderboard", "--db", "empty.db"], "holds no results yet"),
     (["leaderboard", "--db", "ref.db", "--sweep", "paper", "--baseline", "ensemble"],
      "note: not normalised (no ensemble default-config rows)"),
     (["leaderboard", "--db", "ref.db", "--baseline", "nope"],
      "--normalise-by 'nope': no such agent"),
     (["sweep", "--agent", "nope", "--db", "x.db"], "unknown agent 'nope'"),
     (["compare", "--agent", "nope", "--db", "ref.db"], "--agent 'nope': no such agent"),
     (["run", "--agent", "mlp", "--import", "no_such_module"], "--import no_such_module: No module")],
)
def test_bad_input_is_a_clear_message_without_traceback(tmp_path, smoke_rows, args, message,
                                                        monkeypatch, capsys):
    """In this process (the command's own entry point, without a new interpreter per case),
    beside a store of mlp rows on the smoke sweep (made up: no input here is computed)."""
    from neural_testbed import agents, cli, leaderboard

    with leaderboard.ResultsStore(tmp_path / "ref.db") as store:
        store.write(smoke_rows("mlp", agents.get_agent("mlp").default, 1.0))
    (tmp_path / "corrupt.db").write_bytes(b"garbage" * 200)
    leaderboard.ResultsStore(tmp_path / "empty.db").close()
    monkeypatch.chdir(tmp_path)
    status = cli.main(args)
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err
    if not message.startswith("note:"):
        assert status == 2


@pytest.fixture
def refused_address():
    """HOST:PORT where nothing listens: a port bound here and never listened on."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield "127.0.0.1:%d" % bound.getsockname()[1]


@pytest.mark.parametrize("flags, message", [
    (["--backend", "ray", "--address", "{address}"],
     "--address {address}: no Ray cluster reachable there (Connection refused within 5 s); "
     "give the HOST:PORT of a running cluster's head, or leave --address out to start a "
     "local one"),
    (["--address", "{address}"],
     "--address {address} names a Ray cluster: it needs --backend ray (the backend is local)"),
    (["--backend", "ray", "--address", "head"],
     "--address 'head': need HOST:PORT of a running Ray cluster's head, e.g. 10.0.0.5:6379"),
])
def test_a_bad_ray_address_is_one_line_before_any_work(tmp_path, refused_address, flags,
                                                       message, monkeypatch, capsys):
    """Refused at once (Ray itself retried an unreachable address for minutes), before the
    store is made, and no Ray is started (the command's entry point, in this process)."""
    from neural_testbed import cli

    flags = [f.format(address=refused_address) for f in flags]
    monkeypatch.chdir(tmp_path)
    try:  # Ray itself would retry for minutes: it must never be asked
        import ray
    except ImportError:
        pass
    else:
        monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called"))
    status = cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", "x.db", *flags])
    assert status == 2
    assert capsys.readouterr().err == (
        f"neural-testbed: error: {message.format(address=refused_address)}\n")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_compare_needs_no_import_for_an_agent_in_the_store(workdir):
    status, out, err = _run(["compare", "--agent", "toy", "--baseline", "mlp", "--sweep",
                             "smoke", "--db", "ref.db"], workdir)
    assert status == 0, err
    assert re.search(r"toy vs mlp: significantly better in \d+, worse in \d+ of 4", out)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_import_runs_the_named_module_and_no_other_file_of_the_working_directory(tmp_path):
    """`--import my_toy_agent` loads my_toy_agent.py from the working directory; a stray
    libtpu.py there, which JAX imports if it can when it picks a backend, never runs."""
    script = pathlib.Path(sys.executable).with_name("neural-testbed")
    if not script.exists():  # `python -m` would put the working directory on sys.path itself
        pytest.skip("the neural-testbed console script is not installed")
    (tmp_path / "my_toy_agent.py").write_text(pathlib.Path(TOY).read_text())
    marker = tmp_path / "stray_libtpu_ran"
    (tmp_path / "libtpu.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = subprocess.run(
        [str(script), "run", "--agent", "toy", "--import", "my_toy_agent", "--sweep", "smoke",
         "--taus", "1", "--db", "r.db", "--quiet"], cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "4 rows computed" in proc.stdout
    assert not marker.exists()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_import_never_lets_the_working_directory_shadow_installed_packages(workdir, tmp_path):
    """A stray matplotlib.py beside the user's module is not what `plot` imports."""
    script = pathlib.Path(sys.executable).with_name("neural-testbed")
    if not script.exists():
        pytest.skip("the neural-testbed console script is not installed")
    (tmp_path / "my_toy_agent.py").write_text(pathlib.Path(TOY).read_text())
    marker = tmp_path / "stray_matplotlib_ran"
    (tmp_path / "matplotlib.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('stray matplotlib.py')\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [str(script), "plot", "--import", "my_toy_agent", "--out", "figs", "--sweep", "smoke",
         "--db", str(workdir / "ref.db")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert list((tmp_path / "figs").glob("*.png"))
