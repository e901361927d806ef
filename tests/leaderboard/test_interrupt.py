"""Ctrl-C on the real command: exit 130 with one last line, never a crash; the store
is intact and the run resumes where it stopped.

Ctrl-C reaches the whole foreground process group, so the signal goes to the
command's process group (workers included). It is sent while an XLA
compilation is in flight (as soon as the progress bar appears) or between
work units (once rows are stored), the two moments a Ctrl-C can meet.
"""

import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from neural_testbed import leaderboard

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
# The quick sweep (18 problems, one per work unit): long enough that the command is
# still running when the signal arrives, even with every program in the compilation cache.
# Taus 1 and 2, not the sweep's 1 and 100: the same work units, a fraction of the
# evaluation (the resumed run completes every problem).
RUN = ["run", "--agent", "mlp", "--sweep", "quick", "--set", "num_steps=100",
       "--problems-per-batch", "1", "--taus", "1,2"]
TOTAL_ROWS = 18 * 2  # problems x taus
INTERRUPTED = ("neural-testbed: interrupted; everything computed so far is in the store, "
               "rerun the same command to continue")


# The command as a terminal's foreground job runs it: with Python's Ctrl-C handler. A shell
# starts a background job (`pytest ... &`) with SIGINT ignored, which its children inherit,
# and Python then installs no handler: the command would (rightly) ignore Ctrl-C.
_AS_IN_A_TERMINAL = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                     "from neural_testbed.cli import main; sys.exit(main())")


class _Command:
    """The command in its own process group, its stderr read as it is written.

    stderr is a pipe, read until every process holding it (the command, its
    workers, multiprocessing's resource tracker) has closed it, so a line
    written after the command's own exit is seen too.
    """

    def __init__(self, args, cwd):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _AS_IN_A_TERMINAL, *args], cwd=cwd, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._chunks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self._chunks.append(line)

    @property
    def err(self) -> str:
        return "".join(self._chunks)

    def finish(self, timeout=120) -> tuple[int, str]:
        """Waits for the exit status and for the end of stderr."""
        try:
            status = self.proc.wait(timeout=timeout)
            self._reader.join(timeout=timeout)
            assert not self._reader.is_alive(), "stderr still open after the command ended"
            return status, self.err
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _count(db):
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error:
        return 0


def _wait_for(condition, proc, what):
    deadline = time.monotonic() + 300
    while not condition():
        assert proc.poll() is None, f"the command ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within 300 s"
        time.sleep(0.02)  # polling interval


def _interrupt(tmp_path, name, extra=(), after_rows=False):
    """Runs the command into ``name``/r.db, sends SIGINT; returns (status, stderr, db)."""
    workdir = tmp_path / name
    workdir.mkdir()
    db = workdir / "r.db"
    command = _Command([*RUN, *extra, "--db", str(db)], workdir)
    try:
        # The run's own bar (in problems), not the memory check's before it (in units).
        _wait_for(lambda: "problem/s" in command.err, command.proc, "the run's progress bar")
        if after_rows:
            _wait_for(lambda: _count(db) >= 2, command.proc, "a stored row")
        os.killpg(command.proc.pid, signal.SIGINT)  # as Ctrl-C in a terminal
    finally:
        status, err = command.finish()
    return status, err, db


def _assert_clean_interrupt(status, err, db):
    assert status == 130, err
    assert err.rstrip("\n").splitlines()[-1] == INTERRUPTED, err
    for crash in ("Segmentation fault", "Fatal Python error", "Traceback"):
        assert crash not in err, err
    assert 0 <= _count(db) < TOTAL_ROWS
    if db.exists():  # an interrupted store is a sound store of complete rows
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        with leaderboard.ResultsStore(db, create=False) as store:
            assert {r.status for r in store.rows()} <= {"ok"}


def test_ctrl_c_on_a_serial_run_exits_130_computing_or_writing_and_the_run_resumes(tmp_path):
    interrupted = []
    for i in range(2):  # a Ctrl-C while the first unit computes, and once rows are stored
        status, err, db = _interrupt(tmp_path, f"serial{i}", after_rows=bool(i % 2))
        _assert_clean_interrupt(status, err, db)
        interrupted.append(db)
    db = max(interrupted, key=_count)  # resume the one that got furthest
    at_interrupt = _count(db)
    assert at_interrupt > 0
    status, err = _Command([*RUN, "--db", str(db), "--quiet"], db.parent).finish(timeout=600)
    assert status == 0, err
    with leaderboard.ResultsStore(db, create=False) as store:
        rows = store.rows()
    assert len(rows) == TOTAL_ROWS and {r.status for r in rows} == {"ok"}


def test_ctrl_c_with_workers_exits_130_and_stops_the_workers(tmp_path):
    psutil = pytest.importorskip("psutil")
    for i in range(2):
        status, err, db = _interrupt(tmp_path, f"workers{i}", extra=("--workers", "2"),
                                     after_rows=bool(i % 2))
        _assert_clean_interrupt(status, err, db)
    # The workers ended with the command (each runs `python -m neural_testbed.run.worker`).
    me = psutil.Process()
    left = [p for p in me.children(recursive=True)
            if "neural_testbed.run.worker" in " ".join(p.cmdline())]
    assert not left
