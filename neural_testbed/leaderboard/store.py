"""The results store: one SQLite row per (agent, config, problem, tau, settings).

Rows are written in transactions as soon as they are computed, so an
interrupted sweep loses nothing and resumes where it stopped. SQLite's
write-ahead log and a busy timeout let several processes of one sweep write
to one store at once. Readers open a store read-only, and a writer changes a
file only once it is known to be a store of ours (or is new or empty), so no
command can damage a file that is not one.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import math
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base, outputs
from neural_testbed.leaderboard.configs import config_hash, config_json

__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "MergeSummary",
    "ResultsStore",
    "StoreError",
    "StoreFullError",
    "StoredRow",
    "check_writable",
    "config_hash",
    "config_json",
    "merge_plan",
    "merge_stores",
    "rows_to_score",
    "stored_row",
    "study_merge_plan",
]

DEFAULT_DB = "neural_testbed_results.db"
# 2: every problem has its own environment and data (version 1 shared one
# environment across the settings of a seed index), belief samples are fresh per
# test sample; rows gained metric, num_clipped and compile_seconds.
# 3: rows gained diagnostics (JSON).
# 4: the row key gained problem_hash (base.definition_hash: what was evaluated), so a
# row is never served for other data under the same problem id. A store of version 2
# or 3 is read as is, its rows' hashes those of today's built-in problems
# (problems.builtin_hashes; none for a user's data files).
# 5: one meaning per column: d_KL in kl / kl_stderr and the NLL in nll / nll_stderr (kl
# held the NLL where metric was "nll"); target ("classification" or "regression"); a
# regression row's noise variance in noise_variance (it was in temperature), with NULL
# temperature, num_classes (was 1), accuracy and ECE. A store of version 2 to 4 is read
# through the same conversion (stored_row) and rewritten as version 5 when it is next
# opened for writing.
SCHEMA_VERSION = 5
_READS = (2, 3, 4, SCHEMA_VERSION)
# Beside the rows, a table of regression agents' predictives at the probes (encoded
# by leaderboard.predictives), one per row that keeps one, for `xll`: kept apart so
# that reading rows never loads them. An addition any schema-3 reader ignores, so the
# version stays 3; a writer creates the table in a store that lacks it.
_PREDICTIVES = "predictives"
# Also beside the rows: per-problem results of the studies that are not rows (`tal`,
# `probe`), one record per (agent, config, problem, study, settings), encoded by
# leaderboard.studies. Added like the predictives table, with the version kept at 3.
_STUDIES = "studies"
_TABLES = ("meta", "results", _PREDICTIVES, _STUDIES)


class StoreError(Exception):
    """A store that cannot be used: missing, corrupt, or from another schema."""


class StoreFullError(StoreError):
    """The disk filled up writing a store: the write that failed was undone, and what the
    store held before it is kept, so the same command, rerun, continues."""

    def __init__(self, path: str):
        super().__init__(f"the disk is full writing the results store {path!r}: the results "
                         "stored before are kept in it, the write that failed was undone; "
                         "free some space and rerun the same command to continue")


def _is_full(error: sqlite3.Error) -> bool:
    return "database or disk is full" in str(error)  # SQLITE_FULL


_KEY_COLUMNS = ("agent", "config_hash", "problem_id", "problem_hash", "tau",
                "num_test", "num_samples", "estimator", "agent_seed")
_COLUMNS = (
    ("agent", "TEXT NOT NULL"),
    ("config_hash", "TEXT NOT NULL"),
    ("config", "TEXT NOT NULL"),  # JSON
    ("problem_id", "TEXT NOT NULL"),
    ("problem_hash", "TEXT NOT NULL"),  # base.definition_hash; "" where unknown (old stores)
    ("target", "TEXT NOT NULL"),  # "classification" or "regression"
    ("temperature", "REAL"),  # classification; NULL for regression
    ("noise_variance", "REAL"),  # regression; NULL for classification
    ("num_train", "INTEGER NOT NULL"),
    ("seed", "INTEGER NOT NULL"),
    ("input_dim", "INTEGER NOT NULL"),
    ("num_classes", "INTEGER"),  # NULL for regression
    ("tau", "INTEGER NOT NULL"),
    ("num_test", "INTEGER NOT NULL"),
    ("num_samples", "INTEGER NOT NULL"),
    ("estimator", "TEXT NOT NULL"),
    ("agent_seed", "INTEGER NOT NULL"),
    ("metric", "TEXT NOT NULL"),  # which was computed: "kl" (d_KL) or "nll"
    ("kl", "REAL"),  # d_KL; NULL unless metric is "kl" (or where it failed)
    ("kl_stderr", "REAL"),
    ("nll", "REAL"),  # the NLL; NULL unless metric is "nll" (or where it failed)
    ("nll_stderr", "REAL"),
    ("num_clipped", "INTEGER NOT NULL"),  # infinite per-sample terms clipped
    ("accuracy", "REAL"),  # NULL for regression
    ("ece", "REAL"),  # NULL for regression
    ("train_seconds", "REAL"),
    ("compile_seconds", "REAL"),
    ("eval_seconds", "REAL"),
    ("status", "TEXT NOT NULL"),
    ("error", "TEXT NOT NULL"),
    ("version", "TEXT NOT NULL"),
    ("timestamp", "TEXT NOT NULL"),
    ("diagnostics", "TEXT"),  # JSON of neural_testbed.diagnostics.as_record, or NULL
)
COLUMNS = tuple(name for name, _ in _COLUMNS)
_RESULT_COLUMNS = ("config", "metric", "kl", "kl_stderr", "nll", "nll_stderr", "num_clipped",
                   "accuracy", "ece", "status", "error")
STUDY_KEY_COLUMNS = ("agent", "config_hash", "problem_id", "study", "settings_hash")
_STUDY_COLUMNS = (
    ("agent", "TEXT NOT NULL"),
    ("config_hash", "TEXT NOT NULL"),
    ("config", "TEXT NOT NULL"),  # JSON
    ("problem_id", "TEXT NOT NULL"),
    ("study", "TEXT NOT NULL"),  # "tal" or "probe"
    ("settings_hash", "TEXT NOT NULL"),
    ("settings", "TEXT NOT NULL"),  # JSON: what changes the numbers
    ("data", "TEXT NOT NULL"),  # JSON: the problem's values
    ("detail", "BLOB"),  # arrays beside them (the probes' per-input distance and variance)
    ("seconds", "REAL"),
    ("version", "TEXT NOT NULL"),
    ("timestamp", "TEXT NOT NULL"),
)
STUDY_COLUMNS = tuple(name for name, _ in _STUDY_COLUMNS)
_STUDY_RESULT_COLUMNS = ("config", "settings", "data", "detail")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredRow(base.ProblemResult):
    """A row as a store or the published table holds it: the computed row, the package
    version and time that wrote it, and where it was read from."""

    version: str
    timestamp: str
    source: str = "local"  # "local" (a results store) or "published" (the package's table)

    def record(self) -> dict[str, Any]:
        """The row's store columns by name, for CSV files and DataFrames."""
        return {c: getattr(self, c) for c in COLUMNS}


def _upgraded(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record of schema 2 to 4 in today's columns. Those overloaded two: ``kl`` held the
    NLL where ``metric`` was "nll", and a regression row (num_classes 1, which no
    classification problem has: how the code of then told them apart) held its noise
    variance in ``temperature``, beside NaN (NULL) accuracy and ECE."""
    regression, exact = record["num_classes"] == 1, record["metric"] == "kl"
    return {**record, "target": "regression" if regression else "classification",
            "temperature": None if regression else record["temperature"],
            "noise_variance": record["temperature"] if regression else None,
            "num_classes": None if regression else record["num_classes"],
            "kl": record["kl"] if exact else None,
            "kl_stderr": record["kl_stderr"] if exact else None,
            "nll": None if exact else record["kl"],
            "nll_stderr": None if exact else record["kl_stderr"],
            "accuracy": None if regression else record["accuracy"],
            "ece": None if regression else record["ece"]}


_SECONDS = ("train_seconds", "compile_seconds", "eval_seconds")


def stored_row(record: Mapping[str, Any], source: str = "local") -> StoredRow:
    """The row of a record of column values (a store's, or the published table's): one of
    schema 4 or older (it has no ``target``) is moved into today's columns first, and a
    column it lacks (``diagnostics`` before schema 3) is None. Seconds that were not
    recorded (NaN, which SQLite keeps as NULL: a model scored from arrays has no training
    time of ours) read as NaN, so that sums of them say unknown instead of failing."""
    if "target" not in record:
        record = _upgraded(record)
    values = {c: record.get(c) for c in COLUMNS}
    values.update({c: math.nan for c in _SECONDS if values[c] is None})
    return StoredRow(**values, source=source)


def _key(row: base.ProblemResult) -> tuple:
    return tuple(getattr(row, c) for c in _KEY_COLUMNS)


def _values(row: StoredRow) -> tuple:
    """The row's values in the order of :data:`COLUMNS`."""
    return tuple(getattr(row, c) for c in COLUMNS)


def _same(value: Any) -> Any:
    """NaN compares equal to NaN when deciding whether two rows are duplicates."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def _plan(records: Sequence[Any], existing: Sequence[Any], key_columns: Sequence[str],
          result_columns: Sequence[str], value: Callable[[Any, str], Any],
          what: str) -> tuple[list[Any], int]:
    """The records a merge would add and the exact duplicates (``value(record, column)``
    reads a column); refuses a conflict."""
    key_of = lambda r: tuple(value(r, c) for c in key_columns)
    result_of = lambda r: tuple(_same(value(r, c)) for c in result_columns)
    known = {key_of(r): result_of(r) for r in existing}
    added, duplicates, conflicts = [], 0, []
    for r in records:
        key, result = key_of(r), result_of(r)
        if key not in known:
            known[key] = result
            added.append(r)
        elif known[key] == result:
            duplicates += 1
        else:
            conflicts.append(key)
    if conflicts:
        shown = "; ".join(", ".join(f"{c}={v}" for c, v in zip(key_columns, key))
                          for key in conflicts[:3])
        raise StoreError(f"{len(conflicts)} {what}(s) conflict with {what}s already merged (same "
                         f"key, different results), nothing was written: {shown}")
    return added, duplicates


def merge_plan(rows: Sequence[StoredRow],
               existing: Sequence[StoredRow] = ()) -> tuple[list[StoredRow], int]:
    """The rows a merge would add to a store holding ``existing``, and the exact duplicates.

    Raises:
      StoreError: if a row has the key of an existing (or earlier) row with a
        different result; nothing should then be written.
    """
    return _plan(rows, existing, _KEY_COLUMNS, _RESULT_COLUMNS, getattr, "row")


def study_merge_plan(records: Sequence[Mapping[str, Any]],
                     existing: Sequence[Mapping[str, Any]] = ()
                     ) -> tuple[list[Mapping[str, Any]], int]:
    """As :func:`merge_plan`, for study records: a conflict is the same (agent, config
    hash, problem, study, settings hash) with another config, settings, data or detail;
    seconds, versions and timestamps may differ."""
    return _plan(records, existing, STUDY_KEY_COLUMNS, _STUDY_RESULT_COLUMNS,
                 lambda r, c: r[c], "study record")


def _builtin_hashes() -> dict[str, str]:
    from neural_testbed.leaderboard import problems  # only for stores of older schemas

    return problems.builtin_hashes()


def _package_version() -> str:
    from neural_testbed import __version__

    return __version__


def check_writable(path: str) -> None:
    """Raises :class:`StoreError` unless a store could be written at ``path``.

    The file, if it exists, must be writable, and so must its directory:
    SQLite keeps the write-ahead log and its index beside the file.
    """
    path = str(path)
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise StoreError(f"{path!r} is a directory, not a results store file")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise StoreError(f"{path!r} is read-only: results cannot be written to it; make it "
                         "writable or use another file")
    if not os.path.isdir(directory):
        raise StoreError(f"cannot create {path!r}: there is no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreError(f"cannot write the results store {path!r}: its directory {directory!r} "
                         "is read-only (SQLite writes its log beside the file); use another file")


def _uri(path: str, **options: str) -> str:
    """An SQLite URI naming ``path`` as a plain file name, even one that starts with
    ``file:`` or holds ``?``: SQLite would otherwise read those as a URI of its own."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path))
    return uri + ("?" + urllib.parse.urlencode(options) if options else "")


def _writable(path: str) -> bool:
    """Whether this process may write ``path`` and SQLite's log files beside it."""
    return (os.access(path, os.W_OK)
            and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK | os.X_OK))


def _connect_read_only(path: str) -> sqlite3.Connection:
    """A connection that cannot change the file (SQLite ``mode=ro``).

    A store in WAL mode needs its shared-memory index beside it; where that
    cannot be created (a read-only directory) no writer can be active either,
    so the file is read as immutable, unless a write-ahead log beside it holds
    transactions that reading the file alone would miss.
    """
    try:
        conn = sqlite3.connect(_uri(path, mode="ro"), uri=True, timeout=120.0,
                               isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 120000")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as error:
        # "unable to open" (the index cannot be made), or a read-only directory, which
        # SQLite reports as "attempt to write a readonly database".
        if "unable to open" not in str(error) and "readonly" not in str(error):
            raise
        wal = path + "-wal"
        if os.path.exists(wal) and os.path.getsize(wal) > 0:
            raise StoreError(
                f"{path!r} cannot be read: its write-ahead log {wal!r} holds transactions "
                "that SQLite can read only by writing an index beside them, and this "
                f"process cannot write in {os.path.dirname(os.path.abspath(path))!r}; ask "
                "its owner to open the store once (which folds the log into the file), or "
                "copy the store and its log to a directory you can write") from None
    conn = sqlite3.connect(_uri(path, mode="ro", immutable="1"), uri=True, isolation_level=None)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return conn


class ResultsStore:
    """A results database file.

    A writer (``create=True``) looks at an existing file read-only first and
    changes nothing in it unless it is a neural-testbed store of this schema
    (or an empty file, which becomes a new store); it also refuses a file or
    directory it could not write, before any work is done. A reader
    (``create=False``) looks at the file read-only (SQLite ``mode=ro``) too, and
    reads it with a connection that refuses every change (``query_only`` where
    it could write the file, so that SQLite removes its log files on closing).

    Args:
      path: the SQLite file; created if missing unless ``create=False``.
      create: True for a writer, which may create the file; False for a
        reader, which needs an existing store and opens it read-only.

    Raises:
      StoreError: the file is missing (``create=False``), is not a SQLite
        database or not a neural-testbed store, was written with an
        incompatible schema, or cannot be written (``create=True``).
    """

    def __init__(self, path: str, create: bool = True):
        self.path = str(path)
        self.read_only = not create
        self._version = SCHEMA_VERSION  # of the file; an older one is rewritten on writing
        if os.path.isdir(self.path):
            raise StoreError(f"{self.path!r} is a directory, not a results store file")
        exists = os.path.exists(self.path)
        if not create and not exists:
            raise StoreError(f"no results store at {self.path!r}; run `neural-testbed run` or "
                             "`neural-testbed sweep` first, or pass --db")
        try:
            if exists and (self.read_only or os.path.getsize(self.path) > 0):
                # Is it a store of ours? Asked read-only, so a foreign file stays as it is.
                self._conn = _connect_read_only(self.path)
                new = self._check_schema(create)
                if self.read_only:
                    if _writable(self.path):
                        self._conn.close()
                        self._conn = self._connect_query_only()
                    return
                self._conn.close()
            else:
                new = True
            check_writable(self.path)
            self._conn = sqlite3.connect(_uri(self.path), uri=True, timeout=120.0,
                                         isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 120000")
            if new:
                self._create_schema()
            self._conn.execute("PRAGMA journal_mode = WAL")  # a change: only once it is ours
            if not new:
                if self._version != SCHEMA_VERSION:
                    self._migrate()
                if not (self._has_table(_PREDICTIVES) and self._has_table(_STUDIES)):
                    with self._transaction():
                        self._create_side_tables()
                else:  # the file passed as ours: take and release the write lock once
                    self._conn.execute("BEGIN IMMEDIATE")
                    self._conn.execute("ROLLBACK")
        except BaseException as error:
            conn = getattr(self, "_conn", None)
            if conn is not None:
                conn.close()
            if not isinstance(error, sqlite3.DatabaseError):
                raise
            if _is_full(error):
                raise StoreFullError(self.path) from None
            if "readonly" in str(error) or "read-only" in str(error):
                raise StoreError(f"{self.path!r} is read-only ({error}); make it writable or "
                                 "use another file") from None
            raise StoreError(
                f"{self.path!r} is not a usable neural-testbed results store ({error})"
            ) from None

    def _connect_query_only(self) -> sqlite3.Connection:
        """A reader's connection to a store it could write: SQLite removes the write-ahead
        log and its index beside the file when the last connection closes, which a
        ``mode=ro`` one cannot do; ``query_only`` refuses every change."""
        conn = sqlite3.connect(_uri(self.path), uri=True, timeout=120.0, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 120000")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn

    def _check_schema(self, create: bool) -> bool:
        """Checks the file is a store of a schema read here; True if it is empty (a new store).

        Ours: a meta table of a schema version read here, a results table, and nothing
        another program made (the ``sqlite_*`` objects are SQLite's own, such as the
        indexes of our keys). Empty: no object at all, nor another program's
        application id or user version. Anything else is refused before it is changed.
        """
        objects = self._conn.execute("SELECT type, name FROM sqlite_master").fetchall()
        tables = {name for kind, name in objects if kind == "table"}
        foreign = [f"{kind} {name!r}" for kind, name in objects
                   if not (kind == "table" and name in _TABLES) and not name.startswith("sqlite_")]
        if {"meta", "results"} <= tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else None
            self._version = version
            if version not in _READS:
                writer = self._conn.execute("SELECT value FROM meta WHERE key='created_by'").fetchone()
                if version == 1:
                    raise StoreError(
                        f"{self.path!r} holds results of the old problem definition (schema 1, "
                        "where problems of one seed shared an environment), which must not be "
                        "mixed with new ones: move it aside or pass a new --db, and rerun")
                raise StoreError(
                    f"{self.path!r} has results schema version {version} (written by "
                    f"neural-testbed {writer[0] if writer else 'unknown'}); this version "
                    f"({_package_version()}) reads schema versions "
                    f"{', '.join(map(str, _READS))}: "
                    "use a new --db file, or the neural-testbed version that wrote it")
            if not foreign:
                return False
        elif not objects:
            foreign = [f"{mark} {value}" for mark in ("application_id", "user_version")
                       if (value := self._conn.execute(f"PRAGMA {mark}").fetchone()[0])]
            if not foreign:
                if not create:
                    raise StoreError(f"{self.path!r} is empty: it holds no results yet")
                return True
        elif not foreign:  # only some of our tables
            foreign = [f"table {name!r}" for name in sorted(tables)]
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if foreign[3:] else "")
        raise StoreError(f"{self.path!r} is a SQLite database but not a neural-testbed results "
                         f"store (it holds {shown}); give another --db file")

    def _create_schema(self) -> None:
        with self._transaction():
            self._check_schema(create=True)  # asked again under the write lock
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._create_tables()
            self._conn.executemany(
                "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                [("schema_version", str(SCHEMA_VERSION)), ("created_by", _package_version())])

    def _create_tables(self) -> None:
        """The results table and the side tables, where missing (inside a transaction)."""
        columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS results ({columns}, PRIMARY KEY "
                           f"({', '.join(_KEY_COLUMNS)}))")
        self._create_side_tables()

    def _create_side_tables(self) -> None:
        """The predictives and studies tables, where missing (inside a transaction)."""
        keys = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS if name in _KEY_COLUMNS)
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {_PREDICTIVES} ({keys}, data BLOB NOT "
                           f"NULL, PRIMARY KEY ({', '.join(_KEY_COLUMNS)}))")
        columns = ", ".join(f"{name} {kind}" for name, kind in _STUDY_COLUMNS)
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {_STUDIES} ({columns}, PRIMARY KEY "
                           f"({', '.join(STUDY_KEY_COLUMNS)}))")

    def _has_table(self, name: str) -> bool:
        return self._conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                                  "name=?", (name,)).fetchone()[0] > 0

    def _migrate(self) -> None:
        """Schema 2, 3 or 4 -> 5, in one transaction: the results and predictives tables are
        rebuilt, each row's values moved into schema 5's columns (:func:`stored_row`);
        rows of schema 2 or 3 and their predictives gain the problem_hash key column, the
        hash of today's built-in problem of their id ("" for other ids: they match no
        problem, so they are recomputed rather than trusted)."""
        with self._transaction():
            row = self._conn.execute(
                "SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if int(row[0]) == SCHEMA_VERSION:  # another writer migrated it meanwhile
                self._version = SCHEMA_VERSION
                return
            old = {}
            for table in ("results", _PREDICTIVES):
                if self._has_table(table):
                    old[table] = self._with_hashes(self._conn.execute(f"SELECT * FROM {table}"))
                    self._conn.execute(f"DROP TABLE {table}")
            self._create_tables()
            self._conn.executemany(
                f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES "
                f"({', '.join('?' * len(COLUMNS))})",
                [_values(stored_row(r)) for r in old.get("results", ())])
            self._insert_predictives([(tuple(r[c] for c in _KEY_COLUMNS), r["data"])
                                      for r in old.get(_PREDICTIVES, ())], "INSERT")
            self._conn.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                               (str(SCHEMA_VERSION),))
        self._version = SCHEMA_VERSION

    @contextlib.contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE takes the write lock up front (waiting for other writers). Any
        failure, the commit's included, undoes the whole transaction."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException as error:
            if self._conn.in_transaction:  # SQLite may have rolled it back already
                self._conn.execute("ROLLBACK")
            if isinstance(error, sqlite3.OperationalError) and _is_full(error):
                raise StoreFullError(self.path) from None
            raise

    def _check_writer(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.path!r} was opened read-only (create=False)")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def write(self, results: Iterable[base.ProblemResult]) -> None:
        """Writes rows in one transaction, replacing rows with the same key (and their
        predictives: a replaced row keeps none unless it brings one)."""
        self._check_writer()
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        version = _package_version()
        results = list(results)
        rows = [{**r.as_dict(), "version": version, "timestamp": now} for r in results]
        placeholders = ", ".join("?" * len(COLUMNS))
        with self._transaction():
            self._conn.executemany(
                f"INSERT OR REPLACE INTO results ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                [tuple(r[c] for c in COLUMNS) for r in rows])
            self._conn.executemany(
                f"DELETE FROM {_PREDICTIVES} WHERE "
                + " AND ".join(f"{c} = ?" for c in _KEY_COLUMNS),
                [_key(r) for r in results])
            self._insert_predictives([(_key(r), r.predictive) for r in results
                                      if r.predictive is not None], "INSERT")

    def _insert_predictives(self, entries: Iterable[tuple[tuple, bytes]], verb: str) -> None:
        """Inserts predictives, each (its row's key values, its encoding)."""
        columns = (*_KEY_COLUMNS, "data")
        self._conn.executemany(
            f"{verb} INTO {_PREDICTIVES} ({', '.join(columns)}) VALUES "
            f"({', '.join('?' * len(columns))})", [(*key, data) for key, data in entries])

    def predictives(self, agent: str, config_hash: str, estimator: str,
                    agent_seed: int) -> dict[tuple[str, int, int, int], bytes]:
        """An agent config's stored predictives (see :mod:`leaderboard.predictives`) by
        (problem id, tau, N, M); empty for a store written before they were kept."""
        if not self._has_table(_PREDICTIVES):
            return {}
        cursor = self._conn.execute(
            f"SELECT * FROM {_PREDICTIVES} WHERE agent=? AND config_hash=? AND estimator=? "
            "AND agent_seed=?", (agent, config_hash, estimator, agent_seed))
        return {(r["problem_id"], r["problem_hash"], r["tau"], r["num_test"],
                 r["num_samples"]): r["data"] for r in self._with_hashes(cursor)}

    def _with_hashes(self, cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
        """A query's records as dicts; in a store of an older schema (read as is) each
        gains the ``problem_hash`` that :meth:`_migrate` would give it."""
        names = [d[0] for d in cursor.description]
        records = [dict(zip(names, values)) for values in cursor]
        if "problem_hash" not in names:
            hashes = _builtin_hashes()
            for r in records:
                r["problem_hash"] = hashes.get(r["problem_id"], "")
        return records

    def done(self, agent: str, config: Any, estimator: str, agent_seed: int,
             status: str | None = None) -> set[tuple[str, str, int, int, int]]:
        """Stored (problem id, problem hash, tau, N, M) of an agent config, optionally of
        one status (a writer's: the store is of this schema)."""
        self._check_writer()
        query = ("SELECT problem_id, problem_hash, tau, num_test, num_samples FROM results "
                 "WHERE agent=? AND config_hash=? AND estimator=? AND agent_seed=?")
        args = [agent, config_hash(agent, config), estimator, agent_seed]
        if status is not None:
            query += " AND status=?"
            args.append(status)
        return set(self._conn.execute(query, args))

    def rows(self, agent: str | None = None, status: str | None = None,
             predictive: bool = False) -> list[StoredRow]:
        """All rows (optionally of one agent / status), in a stable order; with
        ``predictive=True`` each also has its stored ``predictive`` (bytes or None), for
        :meth:`merge`."""
        wanted = [("agent = ?", agent), ("status = ?", status)]
        rows = self._select([(c, [v]) for c, v in wanted if v is not None])
        if predictive:
            stored = {} if not self._has_table(_PREDICTIVES) else {
                tuple(r[c] for c in _KEY_COLUMNS): r["data"] for r in self._with_hashes(
                    self._conn.execute(f"SELECT * FROM {_PREDICTIVES}"))}
            rows = [dataclasses.replace(r, predictive=stored.get(_key(r))) for r in rows]
        return rows

    def _select(self, conditions: Sequence[tuple[str, Sequence[Any]]]) -> list[StoredRow]:
        """The rows meeting every (SQL condition, its arguments), in key order; those of an
        older schema read in today's columns (:func:`stored_row`)."""
        query = "SELECT * FROM results"
        if conditions:
            query += " WHERE " + " AND ".join(c for c, _ in conditions)
        order = _KEY_COLUMNS if self._version >= 4 else (
            c for c in _KEY_COLUMNS if c != "problem_hash")  # older stores lack it
        query += " ORDER BY " + ", ".join(order)
        args = [a for _, values in conditions for a in values]
        return [stored_row(r) for r in self._with_hashes(self._conn.execute(query, args))]

    def run_rows(self, agent: str, configs: Sequence[Any], problems: Sequence[Any],
                 estimators: Sequence[str], agent_seed: int,
                 status: str | None = None) -> list[StoredRow]:
        """The stored rows a run of ``configs`` on ``problems`` computes or reuses, exactly:
        each problem's id and definition, its taus, N and M (rows of other taus or
        settings stored under the same ids are not the run's), in the problems' order,
        then by tau, then in the order of ``estimators``.

        The agent, configs, estimators, seed and status are selected in SQL; the
        per-problem keys, whose hashes an older store computes on reading, here.
        """
        hashes = sorted({config_hash(agent, c) for c in configs})
        estimators = list(dict.fromkeys(estimators))
        conditions = [("agent = ?", [agent]), ("agent_seed = ?", [agent_seed]),
                      (f"config_hash IN ({', '.join('?' * len(hashes))})", hashes),
                      (f"estimator IN ({', '.join('?' * len(estimators))})", estimators)]
        if status is not None:
            conditions.append(("status = ?", [status]))
        keys = {(p.problem_id, base.definition_hash(p), tau, p.num_test, p.num_samples): i
                for i, p in enumerate(problems) for tau in p.taus}

        def key(r):
            return r.problem_id, r.problem_hash, r.tau, r.num_test, r.num_samples
        rows = [r for r in self._select(conditions) if key(r) in keys]
        return sorted(rows, key=lambda r: (keys[key(r)], r.tau, estimators.index(r.estimator)))

    def write_studies(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Writes study records (see :mod:`leaderboard.studies`) in one transaction,
        replacing records with the same key."""
        self._check_writer()
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        version = _package_version()
        records = [{**r, "version": version, "timestamp": now} for r in records]
        with self._transaction():
            self._insert_studies(records, "INSERT OR REPLACE")

    def _insert_studies(self, records: Iterable[Mapping[str, Any]], verb: str) -> None:
        self._conn.executemany(
            f"{verb} INTO {_STUDIES} ({', '.join(STUDY_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(STUDY_COLUMNS))})",
            [tuple(r.get(c) for c in STUDY_COLUMNS) for r in records])

    def studies(self, agent: str | None = None, study: str | None = None,
                config_hash: str | None = None,
                settings_hash: str | None = None) -> list[dict[str, Any]]:
        """Study records (optionally of one agent, study, config hash, settings hash) as
        dicts, in key order; none for a store written before they were kept."""
        if not self._has_table(_STUDIES):
            return []
        wanted = {"agent": agent, "study": study, "config_hash": config_hash,
                  "settings_hash": settings_hash}
        conditions = [(f"{name} = ?", value) for name, value in wanted.items()
                      if value is not None]
        query = f"SELECT {', '.join(STUDY_COLUMNS)} FROM {_STUDIES}"
        if conditions:
            query += " WHERE " + " AND ".join(c for c, _ in conditions)
        query += " ORDER BY " + ", ".join(STUDY_KEY_COLUMNS)
        cursor = self._conn.execute(query, [v for _, v in conditions])
        return [dict(zip(STUDY_COLUMNS, values)) for values in cursor]

    def merge_studies(self, records: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        """Adds study records from another store; returns (added, exact duplicates
        skipped). A conflict (see :func:`study_merge_plan`) writes nothing and raises
        :class:`StoreError`."""
        self._check_writer()
        with self._transaction():
            added, duplicates = study_merge_plan(records, self.studies())
            self._insert_studies(added, "INSERT")
        return len(added), duplicates

    def merge(self, rows: Sequence[StoredRow]) -> tuple[int, int]:
        """Adds rows from another store; returns (added, exact duplicates skipped).

        A row whose key is already here with a different result (config, metric,
        kl, nll, their stderrs, num_clipped, accuracy, ece, status or error) is a
        conflict: nothing is written and a :class:`StoreError` lists the conflicting
        keys (see :func:`merge_plan`). Timings, timestamps and versions may differ
        between duplicates. A row's ``predictive`` (read with
        ``rows(predictive=True)``) comes along, also to a duplicate that lacks one.
        """
        self._check_writer()
        added, duplicates = merge_plan(rows, self.rows())
        placeholders = ", ".join("?" * len(COLUMNS))
        with self._transaction():
            self._conn.executemany(
                f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                [_values(r) for r in added])
            self._insert_predictives([(_key(r), r.predictive) for r in rows
                                      if r.predictive is not None], "INSERT OR IGNORE")
        return len(added), duplicates

    def to_csv(self, path: str, rows: Sequence[StoredRow] | None = None,
               spreadsheet_safe: bool = False) -> int:
        """Writes every row (or ``rows``) to a CSV file, whole or not at all (see
        :func:`outputs.written_whole`), text cells quoted for spreadsheets where asked
        (:func:`outputs.spreadsheet_safe`); returns the row count. The predictives
        (binary, for ``xll``) are not exported."""
        rows = self.rows() if rows is None else rows
        records = [r.record() for r in rows]
        if spreadsheet_safe:
            records = [outputs.spreadsheet_safe(r) for r in records]
        with outputs.written_whole(path, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(records)
        return len(records)


def rows_to_score(path: str, with_baselines: bool = False) -> list[StoredRow]:
    """Every row of the store at ``path``, for the commands that score stored rows.

    A store holding only study records (bandit regrets, active-learning curves...), or
    nothing, is refused with a :class:`StoreError` that says what to do; with
    ``with_baselines`` (the published rows are added by the caller) an empty or missing
    store is no rows.
    """
    if with_baselines and not os.path.exists(path):
        return []  # the published rows alone
    with ResultsStore(path, create=False) as store:
        rows = store.rows()
        held = sorted({r["study"] for r in store.studies()}) if not rows else []
    if held:  # study records are shown beside an agent's `run` rows, not alone
        raise StoreError(f"{path!r} holds study records ({', '.join(held)}) but no "
                         "`run` rows yet: run the agent on a sweep, or export them with "
                         "`export --table studies`")
    if not rows and not with_baselines:
        raise StoreError(f"{path!r} holds no results yet")
    return rows


@dataclasses.dataclass(frozen=True)
class MergeSummary:
    """What :func:`merge_stores` wrote: rows and study records added, and the exact
    duplicates skipped; ``studies`` tells whether any input held study records."""

    added: int
    duplicates: int
    studies_added: int
    studies_duplicates: int
    studies: bool


def merge_stores(inputs: Sequence[str], output: str) -> MergeSummary:
    """Copies the rows (with their predictives) and the study records of the stores at
    ``inputs`` (e.g. the shards of a sweep) into the store at ``output``, created if
    missing.

    Exact duplicates are skipped; a row or record with the same key but other values
    is a conflict, refused with a :class:`StoreError` before anything is written,
    neither ``output`` created nor any of its tables changed.
    """
    check_writable(output)  # before reading anything
    rows, records = [], []
    for path in inputs:
        if not os.path.exists(path):
            raise StoreError(f"merge input {path!r}: no such file")
        with ResultsStore(path, create=False) as source:
            rows += source.rows(predictive=True)
            records += source.studies()
    if not os.path.exists(output) or os.path.getsize(output) == 0:
        merge_plan(rows)  # refuse conflicts before the new store is made
    with ResultsStore(output) as target:
        # Both refusals come before either write: a conflict anywhere writes nothing.
        merge_plan(rows, target.rows())
        study_merge_plan(records, target.studies())
        added, duplicates = target.merge(rows)
        studies_added, studies_duplicates = target.merge_studies(records)
    return MergeSummary(added, duplicates, studies_added, studies_duplicates, bool(records))
