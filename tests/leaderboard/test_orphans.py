"""No process of ours outlives the command: SIGKILL or SIGTERM of the driver of a run
with local worker processes ends every process it started.

Every process of the run inherits a marker in its environment, so the processes are
found by it wherever they were reparented to, and the test never touches another run's
processes on a shared machine.
"""

import os
import pathlib
import signal
import subprocess
import sys
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


def _describe(processes) -> str:
    return "\n".join(f"{p.pid}: {_command_line(p)[:120]}" for p in processes)


def _kill_the_driver_once_started(tmp_path, args, started, sig):
    """Starts the command, waits until ``started(processes)`` holds for the processes of
    the run, sends ``sig`` to the driver only; returns the processes left after a bound."""
    marker = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, PYTHONPATH=str(REPO), NEURAL_TESTBED_TEST_RUN=marker)
    env.pop("RAY_ADDRESS", None)
    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "neural_testbed.cli", *args,
                                 "--db", str(tmp_path / "r.db")], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while not started(_ours(marker)):
            assert proc.poll() is None, (tmp_path / "err.txt").read_text()
            assert time.monotonic() < deadline, "the run's processes did not start"
            time.sleep(0.2)  # polling interval
        seen = _ours(marker)
        proc.send_signal(sig)
        proc.wait(timeout=END_S)
        deadline = time.monotonic() + END_S
        while _ours(marker) and time.monotonic() < deadline:
            time.sleep(0.5)  # polling interval
        return seen, _ours(marker)
    finally:
        for process in _ours(marker):  # whatever the outcome, leave nothing behind
            try:
                process.kill()
            except psutil.Error:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _local_workers(processes) -> bool:
    return sum("spawn_main" in _command_line(p) for p in processes) >= 2


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_driver_ends_its_worker_processes(tmp_path, sig):
    seen, left = _kill_the_driver_once_started(tmp_path, [*SWEEP, "--workers", "2"],
                                               _local_workers, sig)
    assert len(seen) >= 4, _describe(seen)  # the driver, 2 workers, the resource tracker
    assert not left, f"alive after the driver was killed:\n{_describe(left)}"
