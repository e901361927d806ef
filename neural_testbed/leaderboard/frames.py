"""The leaderboard's tables as pandas DataFrames, for notebooks and scripts.

pandas is an optional dependency (``pip install 'neural-testbed[analysis]'``);
everything else in the package works without it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from neural_testbed import outputs
from neural_testbed.diagnostics import report
from neural_testbed.leaderboard import baselines, counted, scoring, studies
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import store as store_lib

__all__ = ["compare_frame", "leaderboard_frame", "parquet_engine", "results_frame",
           "studies_frame", "write_parquet"]


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("these functions return pandas DataFrames: install pandas, e.g. "
                          "pip install 'neural-testbed[analysis]'") from None
    return pandas


def parquet_engine():
    """pandas, where pyarrow is there to write Parquet with; else an error that says what
    to install (checked before a command does any work)."""
    pandas = _pandas()
    try:
        import pyarrow  # noqa: F401  (pandas' Parquet engine)
    except ImportError:
        raise ImportError("Parquet files are written with pyarrow: install it, e.g. pip "
                          "install 'neural-testbed[analysis]'") from None
    return pandas


def write_parquet(records: Sequence[Mapping[str, Any]], columns: Sequence[str],
                  path: str) -> int:
    """Writes ``records`` (``columns``, in order) to a Parquet file, whole or not at all
    (:func:`outputs.written_whole`); returns the count. Text stays text: no spreadsheet
    quoting, since nothing runs a Parquet cell as a formula."""
    frame = parquet_engine().DataFrame(list(records), columns=list(columns))
    with outputs.written_whole(path, "wb") as file:
        frame.to_parquet(file, index=False)
    return len(frame)


def _rows(db: str) -> list[store_lib.StoredRow]:
    with store_lib.ResultsStore(db, create=False) as store:
        return store.rows()


def _study_values(db: str, problems):
    """The studies' per-problem metrics (``tal``, ``self_certainty``) for scoring."""
    with store_lib.ResultsStore(db, create=False) as store:
        records = store.studies()
    return studies.per_problem_metrics(records, problems)[0]


def results_frame(db: str = store_lib.DEFAULT_DB, with_baselines: bool = False):
    """Every stored row, one column per store field, then ``source`` (``local``), then one
    per diagnostics scalar (:data:`neural_testbed.diagnostics.report.ROW_METRICS`; NaN
    where a row has none). The binned curves stay in the ``diagnostics`` JSON column.

    With ``with_baselines``, the published baseline rows shipped with the package follow,
    every one of them, marked ``source == "published"`` (they are not merged with the
    store's: filter on ``source`` to keep them apart); a missing store is then no rows of
    its own.
    """
    rows = store_lib.rows_to_score(db, with_baselines) if with_baselines else _rows(db)
    if with_baselines:
        rows += list(baselines.load().rows)
    frame = _pandas().DataFrame([r.record() for r in rows], columns=list(store_lib.COLUMNS))
    frame["source"] = [r.source for r in rows]
    records = [json.loads(r.diagnostics) if r.diagnostics else {} for r in rows]
    for name in report.ROW_METRICS:
        frame[name] = [math.nan if rec.get(name) is None else rec[name] for rec in records]
    return frame


def leaderboard_frame(db: str = store_lib.DEFAULT_DB, sweep: str = "quick",
                      tuning: str = "global", baseline: str | None = None,
                      selection: str = "same",
                      with_baselines: bool = False):
    """One row per agent: the ``neural-testbed leaderboard [--with-baselines]`` table,
    with every diagnostics scalar and the stored studies' ``tal`` and
    ``self_certainty``, each beside its ``<name>_stderr``; the rows that count are
    :func:`counted.counted_rows`'s, and ``source`` says which are published. KL is
    normalised by ``baseline`` (default: :func:`scoring.default_normaliser`).

    Example:
      >>> leaderboard_frame("results.db", sweep="paper", tuning="per-setting",
      ...                   selection="held-out")
    """
    problems = problems_lib.get_sweep(sweep)
    rows, _ = counted.counted_rows(_rows(db), problems, None if with_baselines else ())
    normaliser = baseline or scoring.default_normaliser(problems)
    records, _ = scoring.score_agents(rows, problems, tuning, normaliser, selection,
                                      _study_values(db, problems))
    return _pandas().DataFrame(records)


def compare_frame(agent: str, baselines: Sequence[str] = ("mlp",),
                  db: str = store_lib.DEFAULT_DB, sweep: str = "quick", selection: str = "same",
                  metric: str = "loss"):
    """Paired differences: the ``neural-testbed compare [--metric METRIC]`` table.

    The ``scope == "pooled"`` rows (over the whole sweep, per baseline and tau)
    come first, then one row per (baseline, setting, tau), the setting in its named
    columns (``temperature``, ``dataset``, or ``input_dim`` and ``noise_variance``, then
    ``num_train``: :mod:`~neural_testbed.leaderboard.panels`). A ``metric``
    other than the rows' loss (see :data:`scoring.COMPARE_METRICS`) has no tau and its
    difference in ``<metric>_diff``. As the command does, the published rows of the
    baselines fill what the store lacks (``source`` says so).
    """
    problems = problems_lib.get_sweep(sweep)
    per_problem = _study_values(db, problems) if metric in studies.METRICS else None
    rows, _ = counted.counted_rows(_rows(db), problems, list(baselines))
    records = scoring.compare_agents(rows, problems, agent, baselines, selection, metric,
                                     per_problem)
    return _pandas().DataFrame(records)


def studies_frame(db: str = store_lib.DEFAULT_DB):
    """The stored results of ``tal``, ``probe`` and ``bandit`` in long form, one value per
    row: agent, config_hash, problem_id, study, settings_hash, name (a TAL method or
    ``metacorrelation``, a probe, or ``cumulative_regret``), at (``round=R``, the probe's
    parameter or ``step=S``), value.

    Example:
      >>> frame = studies_frame("results.db")
      >>> frame[(frame.study == "tal") & (frame.at == "round=1")].pivot_table(
      ...     index="problem_id", columns="name", values="value")
    """
    with store_lib.ResultsStore(db, create=False) as store:
        records = studies.long_records(store.studies())
    return _pandas().DataFrame(records, columns=list(studies.LONG_COLUMNS))
