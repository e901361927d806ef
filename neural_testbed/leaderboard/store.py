"""The results store: one SQLite row per (agent, config, problem, tau, settings).

Rows are written in transactions as soon as they are computed, so an
interrupted sweep loses nothing and resumes where it stopped. SQLite's
write-ahead log and a busy timeout let several processes of one sweep write
to one store at once.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import math
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base
from neural_testbed.leaderboard.configs import config_hash, config_json

__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "ResultsStore",
    "StoreError",
    "config_hash",
    "config_json",
]

DEFAULT_DB = "neural_testbed_results.db"
# 2: every problem has its own environment and data (version 1 shared one
# environment across the settings of a seed index), belief samples are fresh per
# test sample; rows gained metric, num_clipped and compile_seconds.
SCHEMA_VERSION = 2


class StoreError(Exception):
    """A store that cannot be used: missing, corrupt, or from another schema."""


_KEY_COLUMNS = ("agent", "config_hash", "problem_id", "tau",
                "num_test", "num_samples", "estimator", "agent_seed")
_COLUMNS = (
    ("agent", "TEXT NOT NULL"),
    ("config_hash", "TEXT NOT NULL"),
    ("config", "TEXT NOT NULL"),  # JSON
    ("problem_id", "TEXT NOT NULL"),
    ("temperature", "REAL NOT NULL"),
    ("num_train", "INTEGER NOT NULL"),
    ("seed", "INTEGER NOT NULL"),
    ("input_dim", "INTEGER NOT NULL"),
    ("num_classes", "INTEGER NOT NULL"),
    ("tau", "INTEGER NOT NULL"),
    ("num_test", "INTEGER NOT NULL"),
    ("num_samples", "INTEGER NOT NULL"),
    ("estimator", "TEXT NOT NULL"),
    ("agent_seed", "INTEGER NOT NULL"),
    ("metric", "TEXT NOT NULL"),  # "kl" (kl holds d_KL) or "nll" (kl holds the NLL)
    ("kl", "REAL"),
    ("kl_stderr", "REAL"),
    ("num_clipped", "INTEGER NOT NULL"),  # infinite per-sample terms clipped
    ("accuracy", "REAL"),
    ("ece", "REAL"),
    ("train_seconds", "REAL"),
    ("compile_seconds", "REAL"),
    ("eval_seconds", "REAL"),
    ("status", "TEXT NOT NULL"),
    ("error", "TEXT NOT NULL"),
    ("version", "TEXT NOT NULL"),
    ("timestamp", "TEXT NOT NULL"),
)
COLUMNS = tuple(name for name, _ in _COLUMNS)
_RESULT_COLUMNS = ("config", "metric", "kl", "kl_stderr", "num_clipped", "accuracy", "ece",
                   "status", "error")


def _same(value: Any) -> Any:
    """NaN compares equal to NaN when deciding whether two rows are duplicates."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def _package_version() -> str:
    from neural_testbed import __version__

    return __version__


class ResultsStore:
    """A results database file.

    Args:
      path: the SQLite file; created if missing unless ``create=False``.
      create: whether a missing file may be created (readers pass False).

    Raises:
      StoreError: the file is missing (``create=False``), is not a SQLite
        database, or was written with an incompatible schema.
    """

    def __init__(self, path: str, create: bool = True):
        self.path = str(path)
        if not create and not os.path.exists(self.path):
            raise StoreError(f"no results store at {self.path!r}; run `neural-testbed run` or "
                             "`neural-testbed sweep` first, or pass --db")
        try:
            self._conn = sqlite3.connect(self.path, timeout=120.0, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 120000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._init_schema(create)
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path!r} is not a usable neural-testbed results store ({error})"
            ) from None

    def _init_schema(self, create: bool) -> None:
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else None
            if version != SCHEMA_VERSION:
                writer = self._conn.execute("SELECT value FROM meta WHERE key='created_by'").fetchone()
                if version == 1:
                    raise StoreError(
                        f"{self.path!r} holds results of the old problem definition (schema 1, "
                        "where problems of one seed shared an environment), which must not be "
                        "mixed with new ones: move it aside or pass a new --db, and rerun")
                raise StoreError(
                    f"{self.path!r} has results schema version {version} (written by "
                    f"neural-testbed {writer[0] if writer else 'unknown'}); this version "
                    f"({_package_version()}) reads schema version {SCHEMA_VERSION}: "
                    "use a new --db file, or the neural-testbed version that wrote it")
            return
        if tables:
            raise StoreError(f"{self.path!r} is a SQLite database but not a neural-testbed results store")
        if not create:
            raise StoreError(f"{self.path!r} is empty: it holds no results yet")
        columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
        with self._transaction():
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS results ({columns}, PRIMARY KEY ({', '.join(_KEY_COLUMNS)}))")
            self._conn.executemany(
                "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                [("schema_version", str(SCHEMA_VERSION)), ("created_by", _package_version())])

    @contextlib.contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE takes the write lock up front (waiting for other writers)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def write(self, results: Iterable[base.ProblemResult]) -> None:
        """Writes rows in one transaction, replacing rows with the same key."""
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        version = _package_version()
        records = [
            tuple({**r.as_dict(), "version": version, "timestamp": now}[c] for c in COLUMNS)
            for r in results
        ]
        placeholders = ", ".join("?" * len(COLUMNS))
        with self._transaction():
            self._conn.executemany(
                f"INSERT OR REPLACE INTO results ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                records)

    def done(self, agent: str, config: Any, estimator: str, agent_seed: int,
             status: str | None = None) -> set[tuple[str, int, int, int]]:
        """Stored (problem id, tau, N, M) of an agent config, optionally of one status."""
        query = ("SELECT problem_id, tau, num_test, num_samples FROM results WHERE agent=? "
                 "AND config_hash=? AND estimator=? AND agent_seed=?")
        args = [agent, config_hash(agent, config), estimator, agent_seed]
        if status is not None:
            query += " AND status=?"
            args.append(status)
        return set(self._conn.execute(query, args))

    def rows(self, agent: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """All rows (optionally of one agent / status) as dicts, in a stable order."""
        query, args = "SELECT * FROM results", []
        conditions = []
        if agent is not None:
            conditions.append("agent = ?")
            args.append(agent)
        if status is not None:
            conditions.append("status = ?")
            args.append(status)
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        query += " ORDER BY " + ", ".join(_KEY_COLUMNS)
        cursor = self._conn.execute(query, args)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, values)) for values in cursor]

    def merge(self, rows: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        """Adds rows from another store; returns (added, exact duplicates skipped).

        A row whose key is already here with a different result (config, kl,
        kl_stderr, accuracy, ece, status or error) is a conflict: nothing is
        written and a :class:`StoreError` lists the conflicting keys. Timings,
        timestamps and versions may differ between duplicates.
        """
        key_of = lambda r: tuple(r[c] for c in _KEY_COLUMNS)
        result_of = lambda r: tuple(_same(r[c]) for c in _RESULT_COLUMNS)
        existing = {key_of(r): result_of(r) for r in self.rows()}
        added, duplicates, conflicts = {}, 0, []
        for r in rows:
            key = key_of(r)
            if key in existing:
                known = existing[key]
            elif key in added:
                known = result_of(added[key])
            else:
                known = None
            if known is None:
                added[key] = r
            elif known == result_of(r):
                duplicates += 1
            else:
                conflicts.append(key)
        if conflicts:
            shown = "; ".join(", ".join(f"{c}={v}" for c, v in zip(_KEY_COLUMNS, key))
                              for key in conflicts[:3])
            raise StoreError(f"{len(conflicts)} row(s) conflict with rows already merged (same "
                             f"key, different results), nothing was written: {shown}")
        placeholders = ", ".join("?" * len(COLUMNS))
        with self._transaction():
            self._conn.executemany(
                f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                [tuple(r[c] for c in COLUMNS) for r in added.values()])
        return len(added), duplicates

    def to_csv(self, path: str, rows: Sequence[dict[str, Any]] | None = None) -> int:
        """Writes every row (or ``rows``) to a CSV file; returns the row count."""
        rows = self.rows() if rows is None else rows
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        return len(rows)
