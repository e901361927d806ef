"""Hyperparameter sweeps into the results store, resumable.

Every (config, problem, tau) row is written to the store as soon as its batch
is computed; a rerun skips what the store already holds, so an interrupted
sweep continues where it stopped and nothing is computed twice.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from neural_testbed.agents import registry
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import runner
from neural_testbed.leaderboard import store as store_lib

__all__ = ["SweepSummary", "run_sweep"]


@dataclasses.dataclass
class SweepSummary:
    """What a sweep did."""

    computed: int = 0  # rows computed and written by this call
    reused: int = 0  # rows found in the store and not recomputed
    failed: int = 0  # rows written with status "failed" by this call


def _missing(problems, done) -> list[problems_lib.Problem]:
    return [p for p in problems
            if any((p.problem_id, tau, p.num_test, p.num_samples) not in done for tau in p.taus)]


def run_sweep(
    agent_name: str,
    configs: Sequence[Any],
    problems: Sequence[problems_lib.Problem],
    store: store_lib.ResultsStore,
    *,
    agent_seed: int = 0,
    estimator: str = "auto",
    batch_size: int | None = None,
    recompute: bool = False,
    retry_failed: bool = False,
    progress: bool = True,
) -> SweepSummary:
    """Runs each config of a registered agent on each problem, into ``store``.

    Args:
      agent_name: a registered agent.
      configs: configs of that agent (its sweep, or one config).
      problems: the problems.
      store: where rows are written; rows already there are skipped.
      agent_seed: folded into every problem's agent key.
      estimator: the likelihood estimator setting.
      batch_size: problems of one shape trained together (None = all).
      recompute: recompute and replace rows already in the store.
      retry_failed: recompute only rows stored as failed (plus missing ones).
      progress: show a progress bar with an ETA on stderr.

    Returns:
      Counts of computed, reused and failed rows.
    """
    spec = registry.get_agent(agent_name)
    problems = list(problems)
    by_id = {p.problem_id: p for p in problems}
    rows_per_problem = {p.problem_id: len(p.taus) for p in problems}
    summary = SweepSummary()
    plan = []
    for config in configs:
        done = set() if recompute else store.done(agent_name, config, estimator, agent_seed)
        if retry_failed:
            done -= store.done(agent_name, config, estimator, agent_seed, status="failed")
        todo = _missing(problems, done)
        summary.reused += sum(rows_per_problem[p.problem_id] for p in problems) - sum(
            rows_per_problem[p.problem_id] for p in todo)
        if todo:
            plan.append((config, todo))
    total = sum(len(todo) for _, todo in plan)
    bar = tqdm(total=total, unit="problem", disable=not progress or total == 0, file=sys.stderr,
               desc=agent_name, dynamic_ncols=True)
    with bar:
        for i, (config, todo) in enumerate(plan):
            bar.set_postfix_str(f"config {i + 1}/{len(plan)}")

            def write(rows, config=config):
                store.write(rows, config, by_id, estimator, agent_seed)
                summary.computed += len(rows)
                summary.failed += sum(r.status != "ok" for r in rows)
                bar.update(len({r.problem_id for r in rows}))

            runner.run_agent(
                spec.make(config), todo, agent_name, agent_seed=agent_seed,
                batch_size=batch_size, estimator=estimator, progress=False, on_rows=write)
    return summary
