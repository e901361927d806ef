"""Running the studies that are not rows (`tal`, `probe`, `bandit`, `active`) into a
results store.

They go through the run path (:func:`neural_testbed.run.run_study`: a unit per problem
shape, on the backend the options name, each unit's records written to the store as it
finishes, encoded by :mod:`neural_testbed.leaderboard.studies`); a problem whose result
is already stored with the same agent config and settings is reused, so an interrupted
study resumes where it stopped. Every problem is then reported from the store: a rerun
gives what the first run computed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from neural_testbed import bandit, base, run
from neural_testbed.active import classification, tal
from neural_testbed.leaderboard import probing, studies
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.leaderboard.configs import config_hash

__all__ = ["SeedProblem", "StudyRun", "run_active", "run_bandit", "run_probes", "run_tal"]


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """A study's per-problem results, in the problems' order (read back from the
    store), how many problems were computed and reused, and the seconds computing
    took (compilation included)."""

    results: list[Any]
    computed: int
    reused: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class ProbeStudy:
    """Grover et al.'s probes of one agent config: a unit's records (``WorkUnit.study``)."""

    name: str
    config: Any
    settings: probing.ProbeSettings

    def records(self, build, problems, programs) -> list[dict[str, Any]]:
        records, last = [], time.perf_counter()
        for problem, result in probing.probe_problems(build, problems, self.settings,
                                                      progress=False):
            now = time.perf_counter()
            records.append(studies.probe_record(self.name, self.config, problem.problem_id,
                                                result, self.settings, now - last))
            last = now
        return records


@dataclasses.dataclass(frozen=True)
class TALStudy:
    """Transductive active learning with one agent config choosing the queries."""

    name: str
    config: Any
    settings: tal.TALSettings

    def records(self, build, problems, programs) -> list[dict[str, Any]]:
        return [studies.tal_record(self.name, self.config, result, self.settings)
                for result in tal.iter_tal(build, problems, self.settings)]


def _run(db: str, study: ProbeStudy | TALStudy | SeedStudy, kind: str, settings_json: str,
         build: base.AgentBuilder, problems: Sequence[base.Problem], recompute: bool,
         progress: bool, announce: Callable[[int], None] | None,
         reusable: Callable[[dict[str, Any]], bool] = lambda record: True) -> StudyRun:
    """Opens the store (refusing a file it cannot use before any work), computes the
    problems not stored yet (or stored in a record not ``reusable``, which the new one
    replaces) and reads every problem's record back; ``announce`` gets the number reused
    before the work."""
    with store_lib.ResultsStore(db) as store:
        stored = ({} if recompute else
                  {pid: r for pid, r in studies.stored_by_problem(
                      store, study.name, study.config, kind, settings_json).items()
                   if reusable(r)})
        todo = [p for p in problems if p.problem_id not in stored]
        if announce is not None:
            announce(len(problems) - len(todo))
        start = time.perf_counter()
        run.run_study(study, study.name, study.config, todo, store, build=build,
                      progress=progress)
        seconds = time.perf_counter() - start
        stored = studies.stored_by_problem(store, study.name, study.config, kind, settings_json)
    records = [stored[p.problem_id] for p in problems]
    return StudyRun(records, len(todo), len(problems) - len(todo), seconds)


class SeedProblem(NamedTuple):
    """A seed of a decision task (bandit, active learning) as a unit's "problem": its id,
    and a shape that groups seeds into units of one program each."""

    problem_id: str
    seed: int
    shape: tuple


# Each decision task's program over seeds, record of a seed and settings.
_TASKS = {
    "bandit": (bandit.seeds_program, studies.bandit_record, studies.bandit_settings_json),
    "active": (classification.active_program, studies.active_record,
               studies.active_settings_json),
}


@dataclasses.dataclass(frozen=True)
class SeedStudy:
    """A decision task (``kind``: a key of :data:`_TASKS`) run by one agent config on a
    unit's seeds, in one program per number of seeds."""

    kind: str
    name: str
    config: Any
    setting: Any  # bandit.BanditSetting or classification.ActiveSetting

    def records(self, build, problems, programs) -> list[dict[str, Any]]:
        program, record, _ = _TASKS[self.kind]
        seeds = [p.seed for p in problems]
        agent = build(base.Shapes(self.setting.input_dim, 2))
        key = (self.kind, self.name, config_hash(self.name, self.config), self.setting,
               len(seeds))
        run, compile_s, run_s = programs.run(key, program(agent, self.setting),
                                             (bandit.seed_keys(seeds),))
        run = jax.tree.map(np.asarray, run)
        return [record(self.name, self.config, seed, jax.tree.map(lambda a, i=i: a[i], run),
                       self.setting, (compile_s + run_s) / len(seeds))
                for i, seed in enumerate(seeds)]


def _run_seeds(kind: str, db: str, name: str, build: base.AgentBuilder, config: Any,
               setting: Any, seeds: Sequence[int], seeds_per_unit: int, recompute: bool,
               progress: bool, announce: Callable[[int], None] | None) -> StudyRun:
    """A decision task on each seed, stored a unit of ``seeds_per_unit`` seeds at a time;
    an agent it cannot run is refused before the store is opened."""
    program, _, settings_json = _TASKS[kind]
    program(build(base.Shapes(setting.input_dim, 2)), setting)  # checks the agent
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    problems = [SeedProblem(f"{kind}/{s}", s, (kind, i // seeds_per_unit))
                for i, s in enumerate(seeds)]
    return _run(db, SeedStudy(kind, name, config, setting), kind, settings_json(setting),
                build, problems, recompute, progress, announce)


def run_bandit(db: str, name: str, build: base.AgentBuilder, config: Any,
               setting: bandit.BanditSetting, seeds: Sequence[int], *,
               seeds_per_unit: int = 4, recompute: bool = False, progress: bool = True,
               announce: Callable[[int], None] | None = None) -> StudyRun:
    """Thompson sampling by the agent ``name`` (``build``: ``shapes -> agent`` of
    ``config``) on the bandit of each seed, stored in the store at ``db`` a unit of
    ``seeds_per_unit`` seeds at a time; the results are the records, in the seeds' order.
    An agent the bandit cannot run is refused before the store is opened."""
    return _run_seeds("bandit", db, name, build, config, setting, seeds, seeds_per_unit,
                      recompute, progress, announce)


def run_active(db: str, name: str, build: base.AgentBuilder, config: Any,
               setting: classification.ActiveSetting, seeds: Sequence[int], *,
               seeds_per_unit: int = 4, recompute: bool = False, progress: bool = True,
               announce: Callable[[int], None] | None = None) -> StudyRun:
    """Classification active learning by the agent ``name`` (``build``: ``shapes -> agent``
    of ``config``) with ``setting``'s priority on each seed's problem, stored in the store
    at ``db`` a unit of ``seeds_per_unit`` seeds at a time; the results are the records,
    in the seeds' order. An agent it cannot run is refused before the store is opened."""
    return _run_seeds("active", db, name, build, config, setting, seeds, seeds_per_unit,
                      recompute, progress, announce)


def run_probes(db: str, name: str, build: base.AgentBuilder, config: Any,
               problems: Sequence[base.Problem], settings: probing.ProbeSettings, *,
               recompute: bool = False, progress: bool = True,
               announce: Callable[[int], None] | None = None) -> StudyRun:
    """Grover et al.'s probes (:func:`probing.probe_problems`) of the agent ``name``
    (``build``: ``shapes -> agent`` of ``config``) on each problem, stored in the store
    at ``db``; the results are (problem, :class:`probing.ProblemProbes`) pairs."""
    study = ProbeStudy(name, config, settings)
    result = _run(db, study, "probe", studies.probe_settings_json(settings), build, problems,
                  recompute, progress, announce, reusable=studies.probe_record_is_complete)
    return dataclasses.replace(result, results=[
        (p, studies.probe_result(r)) for p, r in zip(problems, result.results)])


def run_tal(db: str, name: str, build: base.AgentBuilder, config: Any,
            problems: Sequence[base.Problem], settings: tal.TALSettings, *,
            recompute: bool = False, progress: bool = True,
            announce: Callable[[int], None] | None = None) -> StudyRun:
    """Transductive active learning (:func:`tal.iter_tal`) with the agent ``name``
    (``build``: ``shapes -> agent`` of ``config``) choosing the queries on each problem,
    stored in the store at ``db``; the results are :class:`tal.TALResult`."""
    study = TALStudy(name, config, settings)
    result = _run(db, study, "tal", studies.tal_settings_json(settings), build, problems,
                  recompute, progress, announce)
    return dataclasses.replace(result, results=[studies.tal_result(r) for r in result.results])
