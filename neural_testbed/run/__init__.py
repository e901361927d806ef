"""Running agents over problems: one path for every entry point.

A run is planned as work units less what the store holds (:mod:`plan`); units run
where :class:`RunOptions` says (:mod:`execute`), each computed by programs compiled
once per (config batch, shape, batch size) and owned by the run (:mod:`programs`)
into rows (:mod:`rows`); their rows go to the store (:func:`run_sweep`) or back to the caller
(:func:`run_agent`) as each unit finishes, so an interrupted sweep continues where
it stopped and nothing is computed twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from neural_testbed import base
from neural_testbed.agents import validation
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import checks, execute
from neural_testbed.run.options import RunOptions, parse_shard
from neural_testbed.run.plan import WorkUnit, plan_units
from neural_testbed.run.programs import Programs

__all__ = ["Programs", "RunOptions", "SweepSummary", "WorkUnit", "parse_shard", "plan_units",
           "run_agent", "run_study", "run_sweep"]


@dataclasses.dataclass
class SweepSummary:
    """What a sweep did."""

    computed: int = 0  # rows computed and written by this call
    reused: int = 0  # rows found in the store and not recomputed
    failed: int = 0  # rows written with status "failed" by this call


def _options(options: RunOptions | None, settings: dict[str, Any]) -> RunOptions:
    """``options`` with ``settings`` (RunOptions fields by name) replaced, checked."""
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(RunOptions)})
    if unknown:
        raise TypeError(f"unknown run setting(s) {', '.join(unknown)}; allowed: the fields of "
                        f"RunOptions ({', '.join(f.name for f in dataclasses.fields(RunOptions))})")
    return dataclasses.replace(options or RunOptions(), **settings).check()


def _checked_configs(configs: Sequence[Any]) -> list[Any]:
    for config in configs:  # user agents' configs obey the same field rules as built-ins
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            validation.check_fields(config)
    return list(configs)


def _programs_of(unit: WorkUnit) -> tuple:
    """What a unit's compiled programs depend on: units alike share them."""
    return (unit.agent, type(unit.config).__name__, len(unit.more_configs),
            unit.problems[0].shape, unit.pad_to, unit.train_rows, unit.study is None)


def _progress(planned: Sequence[WorkUnit], units: Iterator, total: int, desc: str,
              show: bool, at_once: int) -> Iterator:
    """Yields ``(unit, rows)`` with a progress bar and ETA on stderr; the bar says
    "compiling" while a unit in flight (one of the next ``at_once``) is the first of its
    programs, which a cold run spends most of its first minutes on."""
    pending, compiled = list(planned), set()

    def status(bar, refresh):
        new = any(_programs_of(u) not in compiled for u in pending[:at_once])
        bar.set_postfix_str("compiling" if new else "", refresh=refresh)

    with tqdm(total=total, unit="problem", disable=not show or total == 0, file=sys.stderr,
              desc=desc, dynamic_ncols=True) as bar:
        status(bar, refresh=True)
        for unit, rows in units:
            yield unit, rows
            compiled.add(_programs_of(unit))
            if unit in pending:
                pending.remove(unit)
            status(bar, refresh=False)  # shown by the update
            bar.update(len(unit.problems) * len(unit.configs))


def _at_once(options: RunOptions) -> int:
    """Units in flight at a time: this process's, or one per worker."""
    return max(options.units_at_once, options.workers)


def check_builder(build: Any) -> None:
    """Refuses, in one line, an agent where a function ``shapes -> agent`` is expected."""
    if isinstance(build, (base.Agent, base.HostAgent)) or not callable(build):
        raise TypeError(f"expected a function shapes -> agent (e.g. functools.partial(make, "
                        f"config)), got {type(build).__name__}: an agent is built for one "
                        f"problem shape (base.Shapes), so it is built per shape of the problems")


def run_agent(build: base.AgentBuilder, problems: Sequence[base.Problem],
              agent_name: str = "agent", *, config: Any = None,
              options: RunOptions | None = None,
              on_rows: Callable[[list[base.ProblemResult]], None] | None = None,
              **settings: Any) -> list[base.ProblemResult]:
    """Trains an agent once per problem and evaluates it at each of the problem's taus,
    in this process and without a store: for an agent that need not be registered.

    Args:
      build: ``shapes -> agent``, called once per problem shape (e.g.
        ``functools.partial(make, config)`` of a ``make(config, shapes)``).
      problems: the problems, e.g. ``get_sweep("quick").values()``.
      agent_name: recorded in each row.
      config: the agent's config, recorded (hashed) in each row; None if it has none.
      options: how to run (seed, estimator, batch sizes, units at once); ``settings``
        replace its fields by name, e.g. ``progress=False``.
      on_rows: called with each unit's rows as soon as they are computed.

    Returns:
      One row per (problem, tau), failed problems included (``status="failed"``).

    Example:
      >>> from neural_testbed import agents, leaderboard
      >>> spec = agents.get_agent("mlp")
      >>> rows = leaderboard.run_agent(functools.partial(spec.make, spec.default),
      ...                              leaderboard.get_sweep("quick").values(), "mlp")
    """
    check_builder(build)
    options = _options(options, settings)
    problems = list(problems)
    units, _ = plan_units(agent_name, _checked_configs([config]), problems, None, options,
                          build)
    results: list[base.ProblemResult] = []
    total = sum(len(u.problems) * len(u.configs) for u in units)
    executed = execute.execute(units, options, build)
    with contextlib.closing(executed):
        for _, rows in _progress(units, executed, total, agent_name, options.progress,
                                 _at_once(options)):
            if on_rows is not None:
                on_rows(rows)
            results.extend(rows)
    order = {p.problem_id: i for i, p in enumerate(problems)}
    return sorted(results, key=lambda r: (order[r.problem_id], r.tau))


def run_sweep(agent_name: str, configs: Sequence[Any], problems: Sequence[base.Problem],
              store: store_lib.ResultsStore, options: RunOptions | None = None,
              programs: Programs | None = None, **settings: Any) -> SweepSummary:
    """Runs each config of a registered agent on each problem, into ``store``; rows the
    store holds are skipped (unless ``options.recompute``), each unit's rows written as
    it finishes. ``settings`` replace fields of ``options`` by name; ``programs``: the
    run's programs, some traced already (:func:`checks.check_memory`).

    Returns:
      Counts of computed, reused and failed rows.
    """
    options = _options(options, settings)
    problems = list(problems)
    checks.check_agent_on_problems(agent_name, problems, options.estimator, configs)
    units, reused = plan_units(agent_name, _checked_configs(configs), problems, store, options)
    summary = SweepSummary(reused=reused)
    total = sum(len(u.problems) * len(u.configs) for u in units)
    executed = execute.execute(units, options, programs=programs)
    # Closed on the way out, whatever ends the loop (a Ctrl-C while rows are written
    # would otherwise leave the workers computing and the exit waiting for them).
    with contextlib.closing(executed):
        for _, rows in _progress(units, executed, total, agent_name, options.progress,
                                 _at_once(options)):
            store.write(rows)
            summary.computed += len(rows)
            summary.failed += sum(r.status != "ok" for r in rows)
    return summary


def run_study(study: Any, agent_name: str, config: Any, problems: Sequence[base.Problem],
              store: store_lib.ResultsStore, options: RunOptions | None = None,
              build: base.AgentBuilder | None = None, **settings: Any) -> int:
    """Computes a study's records (tal, probe: ``WorkUnit.study``) on ``problems``, a unit
    per problem shape, where ``options`` says, writing each unit's records to ``store``
    as it finishes; returns how many problems were computed. ``build``: ``shapes ->
    agent`` (this process only); None builds ``agent_name``'s from ``config``."""
    options = _options(options, settings)
    shapes: dict[Any, list[base.Problem]] = {}
    for p in problems:
        shapes.setdefault(p.shape, []).append(p)
    units = [WorkUnit(agent_name, config, tuple(group), study=study) for group in shapes.values()]
    executed = execute.execute(units, options, build)
    with contextlib.closing(executed):
        for _, records in _progress(units, executed, len(problems), agent_name,
                                    options.progress, _at_once(options)):
            store.write_studies(records)
    return len(problems)
