"""The results store: round trip, resumability keys, concurrent writers, bad files."""

import contextlib
import dataclasses
import hashlib
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from neural_testbed import agents, base, generative, leaderboard
from neural_testbed.leaderboard import predictives
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

PROBLEMS = leaderboard.get_sweep("smoke")
CONFIG = agents.MLPConfig()


def _result(pid, tau, kl=0.5, status="ok", config=CONFIG, agent="mlp"):
    return run_rows.result_row(
        agent, store_lib.config_hash(agent, config), store_lib.config_json(config),
        PROBLEMS[pid], tau, "auto", 0, estimate=kl, estimate_stderr=0.01, num_clipped=0,
        accuracy=0.9, ece=0.05, train_seconds=1.0, compile_seconds=0.2, eval_seconds=0.5,
        status=status, error="" if status == "ok" else "boom")


def test_round_trip_and_done_keys(tmp_path):
    with leaderboard.ResultsStore(tmp_path / "r.db") as store:
        store.write([_result(pid, tau) for pid in PROBLEMS for tau in (1, 100)])
        rows = store.rows()
        assert len(rows) == 8
        assert rows[0].config_hash == store_lib.config_hash("mlp", CONFIG)
        assert rows[0].config == store_lib.config_json(CONFIG)
        assert {r.status for r in rows} == {"ok"} and rows[0].version
        assert rows[0].metric == "kl" and rows[0].num_clipped == 0
        assert rows[0].compile_seconds == 0.2
        done = store.done("mlp", CONFIG, "auto", 0)
        definition = base.definition_hash(PROBLEMS["classification_2d/90"])
        assert ("classification_2d/90", definition, 100, 1000, 1000) in done and len(done) == 8
        assert store.done("mlp", CONFIG, "auto", 1) == set()  # another agent seed
        other = agents.MLPConfig(l2_weight_decay=0.5)
        assert store.done("mlp", other, "auto", 0) == set()
        # Writing the same key again replaces the row: no duplicates.
        store.write([_result("classification_2d/90", 1, kl=0.7)])
        assert len(store.rows()) == 8
        assert store.to_csv(tmp_path / "r.csv") == 8


def test_config_hash_is_stable_and_distinguishes_agents_and_values():
    assert store_lib.config_hash("mlp", CONFIG) == store_lib.config_hash("mlp", agents.MLPConfig())
    assert store_lib.config_hash("mlp", CONFIG) != store_lib.config_hash("toy", CONFIG)
    assert store_lib.config_hash("mlp", CONFIG) != store_lib.config_hash(
        "mlp", agents.MLPConfig(num_steps=999))


_WRITER = """
import sys
import tempfile
from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import configs
from neural_testbed.run import rows as run_rows
problem = leaderboard.get_sweep("paper")["classification_2d/0"]
store = leaderboard.ResultsStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    config = agents.MLPConfig(num_steps=1 + i)
    row = run_rows.result_row(
        sys.argv[2], configs.config_hash(sys.argv[2], config), configs.config_json(config),
        problem, 1, "auto", 0, estimate=0.1, estimate_stderr=0.01, num_clipped=0, accuracy=1.0,
        ece=0.0, train_seconds=0.1, compile_seconds=0.0, eval_seconds=0.1)
    store.write([row])
"""


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")
    leaderboard.ResultsStore(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, path, name, "150"])
             for name in ("writer_a", "writer_b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with leaderboard.ResultsStore(path) as store:
        rows = store.rows()
    assert len(rows) == 300
    assert sum(r.agent == "writer_a" for r in rows) == 150


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(store_lib.StoreError, match="no results store at .*nope.db"):
        leaderboard.ResultsStore(tmp_path / "nope.db", create=False)


def test_corrupt_store_is_a_clear_error(tmp_path):
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(store_lib.StoreError, match="is not a usable neural-testbed results store"):
        leaderboard.ResultsStore(path)


def test_foreign_sqlite_file_is_a_clear_error(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(store_lib.StoreError, match="not a neural-testbed results store"):
        leaderboard.ResultsStore(path)


def test_store_from_an_incompatible_version_is_a_clear_error(tmp_path):
    path = tmp_path / "future.db"
    leaderboard.ResultsStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(store_lib.StoreError,
                       match="schema version 99 .* reads schema versions 2, 3, 4, 5"):
        leaderboard.ResultsStore(path)


def test_store_of_the_old_problem_definition_is_refused_in_one_line(tmp_path):
    """Rows of schema 1 came from problems that shared environments: never mixed with new."""
    path = tmp_path / "old.db"
    leaderboard.ResultsStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    with pytest.raises(store_lib.StoreError) as error:
        leaderboard.ResultsStore(path)
    assert "old problem definition" in str(error.value) and "\n" not in str(error.value)
    assert "new --db" in str(error.value)


@contextlib.contextmanager
def _read_only(path):
    """Makes a file or directory unwritable for this process (root included: chattr +i)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root where chattr +i is unavailable: nothing is read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_foreign_sqlite_file_is_refused_and_left_byte_identical(tmp_path, journal):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    before = _digest(path)
    for create in (False, True):
        with pytest.raises(store_lib.StoreError, match="not a neural-testbed results store"):
            leaderboard.ResultsStore(path, create=create)
    assert _digest(path) == before


def test_an_empty_file_stays_empty_for_readers_and_becomes_a_store_for_a_writer(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(store_lib.StoreError, match="is empty: it holds no results yet"):
        leaderboard.ResultsStore(path, create=False)
    assert path.stat().st_size == 0
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
    with leaderboard.ResultsStore(path, create=False) as store:
        assert len(store.rows()) == 1


def test_a_reader_opens_the_store_read_only(tmp_path):
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
    before = _digest(path)
    with leaderboard.ResultsStore(path, create=False) as store:
        assert len(store.rows()) == 1
        with pytest.raises(store_lib.StoreError, match="opened read-only"):
            store.write([_result("classification_2d/90", 100)])
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._conn.execute("DELETE FROM results")  # not even by going around the API
    assert _digest(path) == before


def test_a_read_only_store_file_is_refused_by_a_writer_and_read_by_a_reader(tmp_path):
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
    with _read_only(path):
        with pytest.raises(store_lib.StoreError, match="'.*r.db' is read-only"):
            leaderboard.ResultsStore(path)
        with leaderboard.ResultsStore(path, create=False) as store:
            assert len(store.rows()) == 1


def test_a_store_in_a_read_only_directory_is_refused_by_a_writer_and_read_by_a_reader(tmp_path):
    directory = tmp_path / "shelf"
    directory.mkdir()
    with leaderboard.ResultsStore(directory / "r.db") as store:
        store.write([_result("classification_2d/90", 1)])
    with _read_only(directory):
        for name in ("r.db", "new.db"):
            with pytest.raises(store_lib.StoreError, match="directory .* is read-only"):
                leaderboard.ResultsStore(directory / name)
        with leaderboard.ResultsStore(directory / "r.db", create=False) as store:
            assert len(store.rows()) == 1
    assert sorted(p.name for p in directory.iterdir()) == ["r.db"]
    with pytest.raises(store_lib.StoreError, match="there is no directory"):
        leaderboard.ResultsStore(tmp_path / "missing" / "r.db")


# The results columns as schema 4 wrote them (schemas 2 and 3: less problem_hash, and for 2
# diagnostics): kl held the NLL where metric was "nll", and a regression row its noise
# variance in temperature, with num_classes 1.
_SCHEMA_4_COLUMNS = (
    ("agent", "TEXT NOT NULL"), ("config_hash", "TEXT NOT NULL"), ("config", "TEXT NOT NULL"),
    ("problem_id", "TEXT NOT NULL"), ("problem_hash", "TEXT NOT NULL"),
    ("temperature", "REAL NOT NULL"), ("num_train", "INTEGER NOT NULL"),
    ("seed", "INTEGER NOT NULL"), ("input_dim", "INTEGER NOT NULL"),
    ("num_classes", "INTEGER NOT NULL"), ("tau", "INTEGER NOT NULL"),
    ("num_test", "INTEGER NOT NULL"), ("num_samples", "INTEGER NOT NULL"),
    ("estimator", "TEXT NOT NULL"), ("agent_seed", "INTEGER NOT NULL"),
    ("metric", "TEXT NOT NULL"), ("kl", "REAL"), ("kl_stderr", "REAL"),
    ("num_clipped", "INTEGER NOT NULL"), ("accuracy", "REAL"), ("ece", "REAL"),
    ("train_seconds", "REAL"), ("compile_seconds", "REAL"), ("eval_seconds", "REAL"),
    ("status", "TEXT NOT NULL"), ("error", "TEXT NOT NULL"), ("version", "TEXT NOT NULL"),
    ("timestamp", "TEXT NOT NULL"), ("diagnostics", "TEXT"))


def _schema_4_record(row):
    """What the code of schema 4 stored for a classification d_KL ``row``."""
    return {**row.as_dict(), "version": "0.1.0", "timestamp": "t"}


def _old_store(path, version, records):
    """A store as schema ``version`` (2 to 4) wrote it, holding ``records`` (of
    :func:`_schema_4_record`'s columns): before schema 4 without problem_hash in the key;
    schema 2 also without the diagnostics column and the side tables."""
    columns = [(n, k) for n, k in _SCHEMA_4_COLUMNS if (version == 4 or n != "problem_hash")
               and (version >= 3 or n != "diagnostics")]
    keys = [c for c in store_lib._KEY_COLUMNS if version == 4 or c != "problem_hash"]
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.executemany("INSERT INTO meta VALUES (?, ?)",
                         [("schema_version", str(version)), ("created_by", "0.1.0")])
        conn.execute(f"CREATE TABLE results ({', '.join(f'{n} {k}' for n, k in columns)}, "
                     f"PRIMARY KEY ({', '.join(keys)}))")
        names = [n for n, _ in columns]
        conn.executemany(f"INSERT INTO results ({', '.join(names)}) VALUES "
                         f"({', '.join('?' * len(names))})",
                         [tuple(r[n] for n in names) for r in records])
        if version >= 3:
            kinds = dict(columns)
            conn.execute(f"CREATE TABLE predictives ({', '.join(f'{c} {kinds[c]}' for c in keys)}, "
                         f"data BLOB NOT NULL, PRIMARY KEY ({', '.join(keys)}))")


def _schema_2_store(path):
    _old_store(path, 2, [_schema_4_record(_result(list(PROBLEMS)[0], 1))])


def test_a_schema_2_store_is_read_as_is_and_gains_diagnostics_when_written(tmp_path):
    path = tmp_path / "v2.db"
    _schema_2_store(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with leaderboard.ResultsStore(path, create=False) as store:  # read-only: left as it was
        (old,) = store.rows()
    assert old.diagnostics is None and old.kl == 0.5
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    with leaderboard.ResultsStore(path) as store:
        store.write([dataclasses.replace(_result(list(PROBLEMS)[1], 1), diagnostics='{"bins": 15}')])
        rows = store.rows()
    assert [r.diagnostics for r in rows] == [None, '{"bins": 15}']
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(store_lib.SCHEMA_VERSION),)


BLOB = predictives.encode(np.zeros(3), np.ones((1, 3)), 0.1)


def test_predictives_live_beside_their_rows_and_travel_with_merge(tmp_path):
    pid = list(PROBLEMS)[0]
    with leaderboard.ResultsStore(tmp_path / "a.db") as store:
        store.write([dataclasses.replace(_result(pid, 1), predictive=BLOB), _result(pid, 100)])
        key = ("mlp", store_lib.config_hash("mlp", CONFIG), "auto", 0)
        definition = base.definition_hash(PROBLEMS[pid])
        assert store.predictives(*key) == {(pid, definition, 1, 1000, 1000): BLOB}
        assert all(r.predictive is None for r in store.rows())  # rows never load them
        assert [r.predictive for r in store.rows(predictive=True)] == [BLOB, None]
        store.to_csv(tmp_path / "a.csv")
        rows = store.rows(predictive=True)
        with leaderboard.ResultsStore(tmp_path / "b.db") as other:
            other.write([_result(pid, 1)])  # the same row, kept before predictives were
            assert other.merge(rows) == (1, 1)
            assert other.predictives(*key) == {(pid, definition, 1, 1000, 1000): BLOB}
        store.write([_result(pid, 1)])  # recomputed without one: the old one goes
        assert store.predictives(*key) == {}
    assert "predictive" not in (tmp_path / "a.csv").read_text().splitlines()[0]


def test_a_store_without_the_predictives_table_has_none_and_gains_it_when_written(tmp_path):
    path = tmp_path / "v3.db"
    pid = list(PROBLEMS)[0]
    with leaderboard.ResultsStore(path) as store:
        store.write([_result(pid, 1)])
    with sqlite3.connect(path) as conn:  # as a store written before predictives were kept
        conn.execute("DROP TABLE predictives")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    key = ("mlp", store_lib.config_hash("mlp", CONFIG), "auto", 0)
    with leaderboard.ResultsStore(path, create=False) as store:
        assert store.predictives(*key) == {}
        assert [r.predictive for r in store.rows(predictive=True)] == [None]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    with leaderboard.ResultsStore(path) as store:
        store.write([dataclasses.replace(_result(pid, 100), predictive=BLOB)])
        assert store.predictives(*key) == {
            (pid, base.definition_hash(PROBLEMS[pid]), 100, 1000, 1000): BLOB}


def test_a_schema_3_store_reads_with_todays_builtin_hashes_and_is_rewritten_as_today(tmp_path):
    """Old rows of built-in ids take today's definitions; a user's file rows (whose data
    no old row identifies) get no hash, so they match no problem and are recomputed."""
    path = tmp_path / "v3.db"
    pid = list(PROBLEMS)[0]
    user = dataclasses.replace(_result(pid, 1), problem_id="mine.npz/0")
    _old_store(path, 3, [_schema_4_record(_result(pid, 1)), _schema_4_record(user)])
    key = ("mlp", store_lib.config_hash("mlp", CONFIG), "auto", 0)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO predictives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (key[0], key[1], pid, 1, 1000, 1000, "auto", 0, BLOB))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    definition = base.definition_hash(PROBLEMS[pid])
    with leaderboard.ResultsStore(path, create=False) as store:
        hashes = {r.problem_id: r.problem_hash for r in store.rows()}
        assert store.predictives(*key) == {(pid, definition, 1, 1000, 1000): BLOB}
    assert hashes == {pid: definition, "mine.npz/0": ""}
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # read as is
    with leaderboard.ResultsStore(path) as store:
        assert store.done(*key[:1], CONFIG, *key[2:]) == {
            (pid, definition, 1, 1000, 1000), ("mine.npz/0", "", 1, 1000, 1000)}
        assert store.predictives(*key) == {(pid, definition, 1, 1000, 1000): BLOB}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(store_lib.SCHEMA_VERSION),)
        in_key = {r[1] for r in conn.execute("PRAGMA table_info(results)") if r[5]}
    assert in_key == set(store_lib._KEY_COLUMNS)


def test_a_schema_4_store_reads_each_value_in_its_own_column_and_is_rewritten_so(tmp_path):
    """Schema 4 overloaded columns: a real-data row's kl held its NLL, a regression row's
    temperature its noise variance (num_classes 1, accuracy and ECE NaN, stored NULL).
    Read as is and after the rewrite, each value is in its own column."""
    path = tmp_path / "v4.db"
    classification = _schema_4_record(_result(list(PROBLEMS)[0], 1, kl=0.5))
    nll = {**classification, "problem_id": "iris/0", "problem_hash": "i", "num_classes": 3,
           "metric": "nll", "kl": 1.25, "kl_stderr": 0.05}
    regression = {**classification, "problem_id": "regression/0", "problem_hash": "r",
                  "temperature": 0.01, "num_classes": 1, "input_dim": 1, "kl": 0.3,
                  "kl_stderr": 0.02, "accuracy": None, "ece": None}
    _old_store(path, 4, [classification, nll, regression])
    key = ("mlp", classification["config_hash"], "auto", 0)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO predictives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (key[0], key[1], "regression/0", "r", 1, 1000, 1000, "auto", 0, BLOB))
    before = _digest(path)

    def check(rows):
        by_id = {r.problem_id: r for r in rows}
        c, n, g = by_id[classification["problem_id"]], by_id["iris/0"], by_id["regression/0"]
        assert (c.target, c.metric, c.kl, c.kl_stderr, c.nll, c.nll_stderr) == (
            "classification", "kl", 0.5, 0.01, None, None)
        assert (c.temperature, c.noise_variance, c.num_classes, c.accuracy) == (
            0.1, None, 2, 0.9)
        assert (n.target, n.metric, n.kl, n.kl_stderr, n.nll, n.nll_stderr) == (
            "classification", "nll", None, None, 1.25, 0.05)
        assert n.estimate("nll") == (1.25, 0.05) and n.num_classes == 3
        with pytest.raises(ValueError, match="holds the nll, not the kl"):
            n.estimate("kl")
        assert (g.target, g.temperature, g.noise_variance, g.num_classes) == (
            "regression", None, 0.01, None)
        assert (g.kl, g.kl_stderr, g.nll, g.accuracy, g.ece) == (0.3, 0.02, None, None, None)
        assert all(r.version == "0.1.0" and r.timestamp == "t" for r in rows)

    with leaderboard.ResultsStore(path, create=False) as store:
        check(store.rows())
    assert _digest(path) == before  # read as is
    with leaderboard.ResultsStore(path) as store:
        check(store.rows())
        assert store.predictives(*key) == {("regression/0", "r", 1, 1000, 1000): BLOB}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(store_lib.SCHEMA_VERSION),)
        columns = [r[1] for r in conn.execute("PRAGMA table_info(results)")]
        stored = conn.execute("SELECT temperature, noise_variance, num_classes, kl, nll FROM "
                              "results WHERE problem_id = 'regression/0'").fetchone()
    assert columns == list(store_lib.COLUMNS)
    assert stored == (None, 0.01, None, 0.3, None)


def test_rows_written_today_carry_one_meaning_per_column(tmp_path):
    """A real-data problem's estimate goes to nll, a regression problem's noise variance to
    noise_variance; neither row has a value in the other's columns."""
    real = generative.file_problems(_npz(tmp_path))["data.npz/0"]
    regression = leaderboard.get_sweep("regression-quick")["regression/0"]
    rows = [run_rows.result_row("mlp", "h", "{}", problem, 1, "auto", 0, estimate=0.7,
                              estimate_stderr=0.1, num_clipped=0, accuracy=0.8, ece=0.1,
                              train_seconds=1.0, compile_seconds=0.0, eval_seconds=0.5)
            for problem in (real, regression)]
    with leaderboard.ResultsStore(tmp_path / "r.db") as store:
        store.write(rows)
        stored = {r.problem_id: r for r in store.rows()}
    r, g = stored["data.npz/0"], stored["regression/0"]
    assert (r.metric, r.kl, r.nll, r.nll_stderr, r.target) == (
        "nll", None, 0.7, 0.1, "classification")
    assert (r.accuracy, r.num_classes, r.noise_variance) == (0.8, 2, None)
    assert (g.metric, g.kl, g.nll, g.target, g.noise_variance) == (
        "kl", 0.7, None, "regression", regression.noise_variance)
    assert (g.temperature, g.num_classes, g.accuracy, g.ece) == (None, None, None, None)


def _npz(directory):
    """A small two-class data file: 30 training and 10 test pairs in 2 dimensions."""
    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    path = directory / "data.npz"
    np.savez(path, x_train=x[:30], y_train=y[:30], x_test=x[30:], y_test=y[30:])
    return path


def test_a_rows_definition_hash_identifies_what_it_evaluated(tmp_path):
    problem = PROBLEMS["classification_2d/90"]
    same = dataclasses.replace(problem, problem_id="other/1", taus=(1, 2, 5))
    assert base.definition_hash(same) == base.definition_hash(problem)  # id and taus aside
    for changed in (dataclasses.replace(problem, temperature=0.5),
                    dataclasses.replace(problem, seed=7),
                    dataclasses.replace(problem, env_hidden=(10,))):
        assert base.definition_hash(changed) != base.definition_hash(problem)
    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    split = lambda labels: dict(x_train=x[:30], y_train=labels[:30], x_test=x[30:],
                                y_test=labels[30:])
    np.savez(tmp_path / "a" / "same.npz", **split(y))
    np.savez(tmp_path / "b" / "same.npz", **split(1 - y))
    a = generative.file_problems(tmp_path / "a" / "same.npz")["same.npz/0"]
    b = generative.file_problems(tmp_path / "b" / "same.npz")["same.npz/0"]
    assert base.definition_hash(a) != base.definition_hash(b)  # same name, other labels
    np.savez(tmp_path / "b" / "copy.npz", **split(y))
    copy = generative.file_problems(tmp_path / "b" / "copy.npz")["copy.npz/0"]
    assert base.definition_hash(copy) == base.definition_hash(a)  # same contents elsewhere


_ENV = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2]))
_READER = """
import sys
import tempfile
from neural_testbed import leaderboard
from neural_testbed.leaderboard import store as store_lib
try:
    with leaderboard.ResultsStore(sys.argv[1], create=False) as store:
        print(len(store.rows()))
except store_lib.StoreError as error:
    print(error)
"""


@contextlib.contextmanager
def _another_users_shelf(tmp_path):
    """A directory holding a store that a reading process can read but neither write nor
    write beside, and the command prefix that starts that process.

    The files are made 0444 in a 0555 directory; where this process is root, whom
    permissions do not stop, the reader runs as nobody (``setpriv``) instead, in a
    directory nobody can reach (pytest's own are root's alone)."""
    if os.geteuid() != 0:
        shelf, prefix = tmp_path / "shelf", []
        shelf.mkdir()
    else:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no other user to read as")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if subprocess.run([*prefix, sys.executable, "-c", "import neural_testbed"], env=_ENV,
                          capture_output=True, timeout=300).returncode != 0:
            pytest.skip("running as root, and nobody cannot run this Python: no other user "
                        "to read as")
        shelf = pathlib.Path(tempfile.mkdtemp(prefix="neural_testbed_shelf_"))
        shelf.chmod(0o755)
    try:
        yield shelf, prefix
    finally:
        shelf.chmod(0o755)
        if os.geteuid() == 0:
            shutil.rmtree(shelf)


def _read_as(prefix, path):
    """What _READER prints in a process started with ``prefix``: the row count or the error."""
    proc = subprocess.run([*prefix, sys.executable, "-c", _READER, str(path)], env=_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.parametrize("logs", ["none", "of a writer still open"])
def test_a_shared_store_is_read_by_a_user_who_cannot_write_it_or_its_directory(tmp_path, logs):
    """A store in WAL mode whose reader can write neither the file nor the directory, so
    SQLite cannot make the index of the log; with a writer still open, its log and index
    are there (and not writable by the reader either)."""
    with _another_users_shelf(tmp_path) as (shelf, prefix):
        path = shelf / "r.db"
        with leaderboard.ResultsStore(path) as store:
            store.write([_result("classification_2d/90", 1), _result("classification_2d/90", 100)])
        with contextlib.ExitStack() as stack:
            if logs != "none":
                writer = stack.enter_context(leaderboard.ResultsStore(path))
                writer.write([_result("classification_2d/91", 1)])  # in the log only
                assert sorted(p.name for p in shelf.iterdir()) == ["r.db", "r.db-shm", "r.db-wal"]
            for p in shelf.iterdir():
                p.chmod(0o444)
            shelf.chmod(0o555)
            assert _read_as(prefix, path) == ("2" if logs == "none" else "3")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_log_that_the_reader_cannot_index_is_refused_not_skipped(tmp_path):
    """A write-ahead log left without its index (a writer killed, the index removed) in a
    directory the reader cannot write: reading the file alone would miss the log's rows."""
    with _another_users_shelf(tmp_path) as (shelf, prefix):
        path = shelf / "r.db"
        leaderboard.ResultsStore(path).close()
        killed = ("import os, sys\nfrom neural_testbed import leaderboard\n"
                  "store = leaderboard.ResultsStore(sys.argv[1])\n"
                  "store._conn.execute('PRAGMA wal_autocheckpoint = 0')\n"
                  "store._conn.execute(\"INSERT INTO meta VALUES ('x', 'y')\")\n"
                  "os._exit(0)\n")
        subprocess.run([sys.executable, "-c", killed, str(path)], env=_ENV, check=True,
                       timeout=300)
        (shelf / "r.db-shm").unlink()
        for p in shelf.iterdir():
            p.chmod(0o444)
        shelf.chmod(0o555)
        error = _read_as(prefix, path)
        assert "r.db-wal' holds transactions" in error and "\n" not in error, error


def _foreign_meta(version):
    return ["CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
            f"INSERT INTO meta VALUES ('schema_version', '{version}')",
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)"]


@pytest.mark.parametrize("statements, holds", [
    (_foreign_meta(3), "table 'accounts'"),
    (_foreign_meta(2), "table 'accounts'"),
    (["CREATE VIEW answer AS SELECT 42"], "view 'answer'"),
    (["PRAGMA application_id = 1234"], "application_id 1234"),
    (["PRAGMA user_version = 7"], "user_version 7"),
])
def test_a_foreign_database_is_refused_by_readers_and_writers_and_left_as_it_was(
        tmp_path, statements, holds):
    """Another program's file, even with a meta table like ours or nothing but its mark in
    the header, is neither switched to WAL nor given our tables."""
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.close()
    before = _digest(path)
    for create in (False, True):
        with pytest.raises(store_lib.StoreError) as error:
            leaderboard.ResultsStore(path, create=create)
        message = str(error.value)
        assert "is a SQLite database but not a neural-testbed results store" in message
        assert f"(it holds {holds})" in message and "\n" not in message
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


@pytest.mark.parametrize("statement, holds", [
    ("CREATE TABLE notes (text TEXT)", "table 'notes'"),
    ("CREATE INDEX by_kl ON results (kl)", "index 'by_kl'"),
    ("CREATE TRIGGER stamp AFTER INSERT ON results BEGIN SELECT 1; END", "trigger 'stamp'"),
])
def test_a_store_with_another_programs_objects_is_refused_and_left_as_it_was(
        tmp_path, statement, holds):
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(statement)
    before = _digest(path)
    for create in (False, True):
        with pytest.raises(store_lib.StoreError, match=f"results store \\(it holds {holds}\\)"):
            leaderboard.ResultsStore(path, create=create)
    assert _digest(path) == before


def test_a_path_that_starts_with_file_is_a_plain_file_name(tmp_path, monkeypatch):
    """Not an SQLite URI: 'file:x.db?mode=memory' is a file of that name, kept on disk."""
    monkeypatch.chdir(tmp_path)
    for name in ("file:u.db", "file:x.db?mode=memory"):
        with leaderboard.ResultsStore(name) as store:
            store.write([_result("classification_2d/90", 1)])
        with leaderboard.ResultsStore(name, create=False) as store:
            assert len(store.rows()) == 1
        assert (tmp_path / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file:u.db", "file:x.db?mode=memory"]


def test_no_log_files_are_left_beside_a_store_once_it_is_closed(tmp_path):
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]
    before = _digest(path)
    with leaderboard.ResultsStore(path, create=False) as store:
        assert len(store.rows()) == 1
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._conn.execute("DELETE FROM results")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]
    assert _digest(path) == before


def test_a_full_disk_is_one_error_and_keeps_the_rows_written_before(tmp_path):
    """SQLite's 'database or disk is full', here from a page limit: the write is undone,
    earlier rows stay, and the store is still usable."""
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write([_result("classification_2d/90", 1)])
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
        big = [dataclasses.replace(_result(pid, tau), error="x" * 5000)
               for pid in PROBLEMS for tau in (1, 100)]
        with pytest.raises(store_lib.StoreFullError) as error:
            store.write(big)
        assert str(error.value) == (
            f"the disk is full writing the results store {str(path)!r}: the results stored "
            "before are kept in it, the write that failed was undone; free some space and "
            "rerun the same command to continue")
        assert not store._conn.in_transaction
    with leaderboard.ResultsStore(path) as store:
        assert [(r.problem_id, r.tau) for r in store.rows()] == [("classification_2d/90", 1)]
        store.write(big)
        assert len(store.rows()) == 8


def test_run_rows_selects_one_runs_rows_in_the_problems_order(tmp_path):
    """Only the config, seed, estimator, status and problem definitions asked for; the
    problems' order, then tau, then the estimators' order."""
    other = dataclasses.replace(CONFIG, l2_weight_decay=CONFIG.l2_weight_decay * 2)
    first, second = list(PROBLEMS)[:2]
    rows = [_result(second, 1), _result(first, 100), _result(first, 1, status="failed"),
            _result(first, 1, config=other)]
    seeded = dataclasses.replace(_result(second, 100), agent_seed=1)
    monte = dataclasses.replace(_result(second, 1), estimator="monte_carlo")
    changed = dataclasses.replace(PROBLEMS[second], num_samples=PROBLEMS[second].num_samples + 1)
    with store_lib.ResultsStore(str(tmp_path / "r.db")) as store:
        store.write([*rows, seeded, monte])
        problems = [PROBLEMS[first], PROBLEMS[second]]
        got = store.run_rows("mlp", [CONFIG], problems, ["auto"], 0)
        assert [(r.problem_id, r.tau) for r in got] == [(first, 1), (first, 100),
                                                              (second, 1)]
        failed = store.run_rows("mlp", [CONFIG], problems, ["auto"], 0, status="failed")
        assert [(r.problem_id, r.tau) for r in failed] == [(first, 1)]
        both = store.run_rows("mlp", [CONFIG], [PROBLEMS[second]], ["monte_carlo", "auto"], 0)
        assert [r.estimator for r in both] == ["monte_carlo", "auto"]
        assert store.run_rows("mlp", [CONFIG], [changed], ["auto"], 0) == []


def test_merge_stores_says_what_it_added_and_skipped(tmp_path):
    first, second = list(PROBLEMS)[:2]
    paths = [str(tmp_path / name) for name in ("a.db", "b.db")]
    for path, pids in zip(paths, ([first], [first, second])):
        with store_lib.ResultsStore(path) as store:
            store.write([_result(pid, 1) for pid in pids])
    summary = store_lib.merge_stores(paths, str(tmp_path / "out.db"))
    assert summary == store_lib.MergeSummary(added=2, duplicates=1, studies_added=0,
                                             studies_duplicates=0, studies=False)


def test_seconds_not_recorded_read_back_as_nan_and_the_board_scores_them(tmp_path):
    """A model scored from arrays has no training time of ours (NaN, which SQLite keeps as
    NULL): read back it is NaN, and the leaderboard scores the rows, its seconds unknown."""
    import math

    rows = [run_rows.result_row("know_nothing", "h", "{}", problem, tau, "auto", 0,
                                estimate=tau * 0.5, estimate_stderr=0.01, num_clipped=0,
                                accuracy=0.5, ece=0.1, train_seconds=math.nan,
                                compile_seconds=0.0, eval_seconds=1.0)
            for problem in PROBLEMS.values() for tau in problem.taus]
    with leaderboard.ResultsStore(tmp_path / "r.db") as store:
        store.write(rows)
        read = store.rows()
    assert all(math.isnan(r.train_seconds) for r in read)
    records, _ = leaderboard.score_agents(read, PROBLEMS, baseline="")
    assert records[0]["kl_1"] == pytest.approx(0.5)
    assert math.isnan(records[0]["seconds_per_problem"])
