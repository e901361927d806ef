"""No process of ours outlives the command: SIGKILL or SIGTERM of the driver of a run
with local worker processes, or with a local Ray cluster, ends every process it started.

Every process of a local run inherits a marker in its environment, so the processes are
found by it wherever they were reparented to, and the test never touches another run's
processes on a shared machine. Ray's agents do not inherit the driver's environment
(the raylet starts them), so the processes of a Ray run are found by its own Ray temp
directory (RAY_TMPDIR): they name it on their command line or hold a file under it open.
"""

import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
TOY = str(pathlib.Path(__file__).with_name("toy_agent.py"))
SWEEP = ["sweep", "--agent", "mlp", "--sweep", "smoke", "--taus", "1", "--quiet"]
START_S = 300  # bound on waiting for the run's processes to start
END_S = 60  # bound on waiting for them to end once the driver is killed


def _ours(marker: str) -> list:
    """The living processes whose environment carries the marker."""
    found = []
    for process in psutil.process_iter():
        try:
            if (process.status() != psutil.STATUS_ZOMBIE
                    and process.environ().get("NEURAL_TESTBED_TEST_RUN") == marker):
                found.append(process)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
    return found


def _command_line(process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return "(gone)"


def _snapshot(processes) -> list:
    """The processes as lines of text, taken now (they may be gone when reported)."""
    return [f"{p.pid}: {_command_line(p)[:120]}" for p in processes]


def _describe(snapshot) -> str:
    return "\n".join(snapshot)


def _kill_the_driver_once_started(tmp_path, args, started, sig, find=None, env=(),
                                  end_s=END_S):
    """Starts the command, waits until ``started(processes)`` holds for the processes of
    the run, sends ``sig`` to the driver only; returns the processes seen then and those
    left ``end_s`` after, as text (see :func:`_snapshot`). ``find(driver_pid)`` lists the
    run's processes (default: those carrying the run's environment marker)."""
    marker = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, PYTHONPATH=str(REPO), NEURAL_TESTBED_TEST_RUN=marker, **dict(env))
    env.pop("RAY_ADDRESS", None)
    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "neural_testbed.cli", *args,
                                 "--db", str(tmp_path / "r.db")], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    ours = (lambda: find(proc.pid)) if find else (lambda: _ours(marker))
    try:
        deadline = time.monotonic() + START_S
        while not started(ours()):
            assert proc.poll() is None, (tmp_path / "err.txt").read_text()
            assert time.monotonic() < deadline, "the run's processes did not start"
            time.sleep(0.2)  # polling interval
        seen = _snapshot(ours())
        proc.send_signal(sig)
        proc.wait(timeout=end_s)
        deadline = time.monotonic() + end_s
        while ours() and time.monotonic() < deadline:
            time.sleep(0.5)  # polling interval
        return seen, _snapshot(ours())
    finally:
        for process in ours():  # whatever the outcome, leave nothing behind
            try:
                process.kill()
            except psutil.Error:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _local_workers(processes) -> bool:
    return sum("neural_testbed.run.worker" in _command_line(p) for p in processes) >= 2


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_driver_ends_its_worker_processes(tmp_path, sig):
    seen, left = _kill_the_driver_once_started(tmp_path, [*SWEEP, "--workers", "2"],
                                               _local_workers, sig)
    assert len(seen) >= 3, _describe(seen)  # the driver and 2 workers
    assert not left, f"alive after the driver was killed:\n{_describe(left)}"


def _under(directory: str, driver: int) -> list:
    """The living processes that name ``directory`` on their command line or hold a file
    under it open (Ray's agents rename themselves: their log files show whose they are),
    and the driver's Ray watchdog, which names the driver's pid."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            line = process.cmdline()
            watchdog = len(line) >= 2 and line[-2].endswith("ray_watchdog.py") and (
                line[-1] == str(driver))
            if (watchdog or directory in " ".join(line)
                    or any(f.path.startswith(directory + os.sep) for f in process.open_files())):
                found.append(process)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
    return found


def _ray_started(processes) -> bool:
    """Whether the raylet's agents and a worker are up."""
    lines = [_command_line(p) for p in processes]
    return all(any(name in line for line in lines)
               for name in ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "default_worker.py"))


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_driver_ends_its_local_ray_cluster(tmp_path, sig):
    """The raylet's agents and workers (which Ray does not tie to the driver) end too,
    within 30 s; without the watchdog they stayed about a minute."""
    # A short private Ray temp directory: Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="nt-ray-", dir="/tmp")
    try:
        seen, left = _kill_the_driver_once_started(
            tmp_path, ["sweep", "--agent", "toy", "--import", TOY, "--sweep", "smoke",
                       "--taus", "1,2", "--backend", "ray", "--workers", "1", "--quiet"],
            _ray_started, sig, find=lambda driver: _under(ray_tmp, driver),
            env={"RAY_TMPDIR": ray_tmp}, end_s=30)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for name in ("gcs_server", "raylet", "ray_watchdog.py"):  # not vacuous: all were found
        assert name in _describe(seen), _describe(seen)
    assert not left, f"alive after the driver was killed:\n{_describe(left)}"
