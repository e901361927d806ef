"""The command and its files: shared read-only stores, foreign databases, `file:` names,
full disks and the log files SQLite keeps beside a store."""

import errno
import hashlib
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import pytest

from neural_testbed import agents, cli, outputs
from neural_testbed import run as sweep_lib
from neural_testbed.leaderboard import store as store_lib

_ENV = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))


@pytest.fixture
def store(tmp_path, smoke_rows):
    path = tmp_path / "r.db"
    with store_lib.ResultsStore(path) as s:
        s.write(smoke_rows("mlp", agents.MLPConfig(), 0.2))
    return path


def _digest(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_read_only_commands_read_a_store_that_they_cannot_write_nor_write_beside(
        tmp_path, smoke_rows):
    """Another user's 0644 store in a 0755 directory: leaderboard, export and merge read it.
    Files 0444 in a 0555 directory; where this process is root (whom permissions do not
    stop), the commands run as nobody, in a directory nobody can reach."""
    if os.geteuid() != 0:
        top, prefix = tmp_path, []
    else:
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if shutil.which("setpriv") is None or subprocess.run(
                [*prefix, sys.executable, "-c", "import neural_testbed"], env=_ENV,
                capture_output=True, timeout=300).returncode != 0:
            pytest.skip("running as root, and nobody cannot run this Python: no other user "
                        "to read as")
        top = pathlib.Path(tempfile.mkdtemp(prefix="neural_testbed_shelf_"))
        top.chmod(0o755)
    shelf, out = top / "shelf", top / "out"
    shelf.mkdir()
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    try:
        with store_lib.ResultsStore(shelf / "r.db") as s:
            s.write(smoke_rows("mlp", agents.MLPConfig(), 0.2))
        (shelf / "r.db").chmod(0o444)
        shelf.chmod(0o555)
        db = str(shelf / "r.db")
        for argv, said in ((["leaderboard", "--sweep", "smoke", "--db", db], "mlp "),
                           (["export", "--db", db, "-o", str(out / "x.csv")], "wrote 8 rows"),
                           (["merge", db, "-o", str(out / "m.db")], "8 rows added")):
            proc = subprocess.run([*prefix, sys.executable, "-m", "neural_testbed.cli", *argv],
                                  env=_ENV, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0 and said in proc.stdout, (argv, proc.stderr)
        assert sorted(p.name for p in shelf.iterdir()) == ["r.db"]
        assert sorted(p.name for p in out.iterdir()) == ["m.db", "x.csv"]
    finally:
        shelf.chmod(0o755)
        if top != tmp_path:
            shutil.rmtree(top)


def test_a_database_with_a_meta_table_like_ours_is_left_as_it_was(
        tmp_path, capsys, no_work, one_error_line):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '3')")
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    conn.close()
    before = _digest(path)
    for argv in (["run", "--agent", "mlp", "--sweep", "smoke"], ["leaderboard"],
                 ["export", "-o", str(tmp_path / "x.csv")]):
        assert cli.main([*argv, "--db", str(path)]) == 2, argv
        one_error_line("is a SQLite database but not a neural-testbed results store "
                                "(it holds table 'accounts')")
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def _fake_run_sweep(monkeypatch, smoke_rows, before_writing=None):
    """`run` computes the smoke sweep's rows of mlp's default config at once (no training);
    ``before_writing(store)`` may fill the store's disk first."""
    def run_sweep(name, configs, problems, store, **kwargs):
        if before_writing is not None:
            before_writing(store)
        rows = smoke_rows("mlp", agents.MLPConfig(), 0.2)
        store.write(rows)
        return sweep_lib.SweepSummary(computed=len(rows))
    monkeypatch.setattr(sweep_lib, "run_sweep", run_sweep)


@pytest.mark.parametrize("name", ["file:u.db", "file:x.db?mode=memory"])
def test_a_db_that_starts_with_file_is_a_file_of_that_name_for_every_command(
        tmp_path, capsys, monkeypatch, name, smoke_rows):
    monkeypatch.chdir(tmp_path)
    _fake_run_sweep(monkeypatch, smoke_rows)
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", name]) == 0
    assert "8 rows computed, 0 reused" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", name]) == 0
    assert cli.main(["merge", name, "-o", "file:m.db"]) == 0
    assert cli.main(["export", "--db", "file:m.db", "-o", "x.csv"]) == 0
    assert "wrote 8 rows to x.csv" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "file:m.db", "x.csv"])


def test_no_log_files_are_left_beside_the_store_after_commands(tmp_path, capsys, monkeypatch,
                                                              smoke_rows):
    db = str(tmp_path / "r.db")
    _fake_run_sweep(monkeypatch, smoke_rows)
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", db]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]
    for argv in (["leaderboard", "--sweep", "smoke", "--db", db],
                 ["export", "--db", db, "-o", str(tmp_path / "x.csv")],
                 ["merge", db, "-o", str(tmp_path / "m.db")]):
        assert cli.main(argv) == 0, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db", "r.db", "x.csv"]


@pytest.mark.parametrize("table", ["rows", "studies"])
def test_export_to_a_full_device_is_one_line(store, capsys, table, one_error_line):
    assert cli.main(["export", "--db", str(store), "--table", table, "-o", "/dev/full"]) == 2
    one_error_line("the disk is full writing '/dev/full': nothing was written to it")


@pytest.fixture
def full_disk(monkeypatch):
    """Output files can be opened, but the disk is full once 100 bytes are written."""
    real_open = open

    class Full:
        def __init__(self, file):
            self.file, self.written = file, 0

        def write(self, data):
            self.written += len(data)
            if self.written > 100:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    monkeypatch.setattr(outputs, "open", lambda *a, **k: Full(real_open(*a, **k)),
                        raising=False)


def test_a_full_disk_leaves_no_partial_csv_and_keeps_an_old_one(
        tmp_path, capsys, monkeypatch, store, full_disk, smoke_rows, one_error_line):
    old = tmp_path / "old.csv"
    old.write_text("kept\n")
    for path in (tmp_path / "new.csv", old):
        assert cli.main(["export", "--db", str(store), "-o", str(path)]) == 2
        one_error_line(f"the disk is full writing {str(path)!r}: nothing was "
                                "written to it")
    assert old.read_text() == "kept\n"
    _fake_run_sweep(monkeypatch, smoke_rows)
    db = tmp_path / "run.db"
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db), "--output",
                     str(tmp_path / "run.csv")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"neural-testbed: error: the disk is full writing "
                   f"{str(tmp_path / 'run.csv')!r}: nothing was written to it; the results are "
                   f"kept in {str(db)!r}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv", "r.db", "run.db"]
    with store_lib.ResultsStore(db, create=False) as s:
        assert len(s.rows()) == 8


def test_a_full_disk_leaves_no_partial_figure(tmp_path, capsys, store, full_disk, one_error_line):
    pytest.importorskip("matplotlib")
    figs = tmp_path / "figs"
    assert cli.main(["plot", "--db", str(store), "--sweep", "smoke", "--out", str(figs)]) == 2
    one_error_line("the disk is full writing", "nothing was written to it")
    assert list(figs.iterdir()) == []


def test_a_full_disk_under_the_store_is_one_line_and_keeps_the_rows_before(tmp_path, capsys,
                                                                          monkeypatch, smoke_rows):
    db = tmp_path / "r.db"
    with store_lib.ResultsStore(db) as s:
        s.write(smoke_rows("mlp", agents.MLPConfig(num_steps=30), 0.1))

    def fill(store):  # SQLite's "database or disk is full", from a page limit
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
    _fake_run_sweep(monkeypatch, smoke_rows, before_writing=fill)
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"neural-testbed: error: the disk is full writing the results store "
                       f"{str(db)!r}: the results stored before are kept in it, the write that "
                       "failed was undone; free some space and rerun the same command to "
                       "continue")
    with store_lib.ResultsStore(db, create=False) as s:
        assert len(s.rows()) == 8


_FULL_AFTER_ONE_WRITE = """
import sys
from neural_testbed import cli
from neural_testbed.leaderboard import store as store_lib

write = store_lib.ResultsStore.write
def write_then_fill(self, results):
    write(self, results)  # the first unit's rows; then the disk is full
    pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
    self._conn.execute(f"PRAGMA max_page_count = {pages}")
store_lib.ResultsStore.write = write_then_fill
sys.exit(cli.main())
"""


@pytest.mark.slow  # trains mlp on the smoke sweep in a command of its own
def test_a_full_store_mid_run_ends_the_command_with_one_line_and_no_warnings(tmp_path):
    """The units still computing in threads when the write fails are not left to fail at
    interpreter shutdown ("cannot schedule new futures after interpreter shutdown")."""
    db = tmp_path / "r.db"
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_AFTER_ONE_WRITE, "run", "--agent", "mlp", "--set",
         "num_steps=5", "--sweep", "smoke", "--taus", "1", "--problems-per-batch", "1",
         "--units-at-once", "2", "--quiet", "--db", str(db)],
        env=_ENV, capture_output=True, text=True, timeout=600)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[0].startswith("agent mlp: ") and len(lines) == 2, proc.stderr
    assert lines[1].startswith("neural-testbed: error: the disk is full writing the results "
                               f"store {str(db)!r}: the results stored before are kept in it")
    with store_lib.ResultsStore(db, create=False) as s:
        assert len(s.rows()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]
