"""Running the studies that are not rows (`tal`, `probe`) into a results store.

Each problem's result is written as soon as it is done (encoded by
:mod:`neural_testbed.leaderboard.studies`), and a problem whose result is
already stored with the same agent config and settings is reused, so an
interrupted study resumes where it stopped. Every problem is then reported
from the store: a rerun gives what the first run computed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from neural_testbed import base
from neural_testbed.active import tal
from neural_testbed.leaderboard import probing, studies
from neural_testbed.leaderboard import store as store_lib

__all__ = ["StudyRun", "run_probes", "run_tal"]


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """A study's per-problem results, in the problems' order (read back from the
    store), how many problems were computed and reused, and the seconds computing
    took (compilation included)."""

    results: list[Any]
    computed: int
    reused: int
    seconds: float


def _run(db: str, agent: str, config: Any, study: str, settings_json: str,
         problems: Sequence[base.Problem],
         compute: Callable[[list[base.Problem]], Iterable[dict[str, Any]]],
         recompute: bool, announce: Callable[[int], None] | None) -> StudyRun:
    """Opens the store (refusing a file it cannot use before any work), computes the
    problems not stored yet, writing each record ``compute`` yields at once, and reads
    every problem's record back; ``announce`` gets the number reused before the work."""
    with store_lib.ResultsStore(db) as store:
        stored = ({} if recompute else
                  studies.stored_by_problem(store, agent, config, study, settings_json))
        todo = [p for p in problems if p.problem_id not in stored]
        if announce is not None:
            announce(len(problems) - len(todo))
        start = time.perf_counter()
        for record in compute(todo):
            store.write_studies([record])
        seconds = time.perf_counter() - start
        stored = studies.stored_by_problem(store, agent, config, study, settings_json)
    records = [stored[p.problem_id] for p in problems]
    return StudyRun(records, len(todo), len(problems) - len(todo), seconds)


def run_probes(db: str, name: str, build: base.AgentBuilder, config: Any,
               problems: Sequence[base.Problem], settings: probing.ProbeSettings, *,
               recompute: bool = False, progress: bool = True,
               announce: Callable[[int], None] | None = None) -> StudyRun:
    """Grover et al.'s probes (:func:`probing.probe_problems`) of the agent ``name``
    (``build``: ``shapes -> agent`` of ``config``) on each problem, stored in the store
    at ``db``; the results are (problem, :class:`probing.ProblemProbes`) pairs."""
    def compute(todo: list[base.Problem]) -> Iterator[dict[str, Any]]:
        last = time.perf_counter()
        for problem, result in probing.probe_problems(build, todo, settings,
                                                      progress=progress, desc=name):
            now = time.perf_counter()
            yield studies.probe_record(name, config, problem.problem_id, result, settings,
                                       now - last)
            last = now
    run = _run(db, name, config, "probe", studies.probe_settings_json(settings), problems,
               compute, recompute, announce)
    results = [(p, studies.probe_result(r)) for p, r in zip(problems, run.results)]
    return dataclasses.replace(run, results=results)


def run_tal(db: str, name: str, build: base.AgentBuilder, config: Any,
            problems: Sequence[base.Problem], settings: tal.TALSettings, *,
            recompute: bool = False, progress: bool = True,
            announce: Callable[[int], None] | None = None) -> StudyRun:
    """Transductive active learning (:func:`tal.iter_tal`) with the agent ``name``
    (``build``: ``shapes -> agent`` of ``config``) choosing the queries on each problem,
    stored in the store at ``db``; the results are :class:`tal.TALResult`."""
    def compute(todo: list[base.Problem]) -> Iterator[dict[str, Any]]:
        for result in tal.iter_tal(build, todo, settings, progress=progress):
            yield studies.tal_record(name, config, result, settings)
    run = _run(db, name, config, "tal", studies.tal_settings_json(settings), problems,
               compute, recompute, announce)
    return dataclasses.replace(run, results=[studies.tal_result(r) for r in run.results])
