"""Planning a run: the work units still to compute, cut the same way for every backend.

A unit is one agent config (or a batch of configs of one group) on one batch of
problems of one shape, or of one padding group where the agent pads. Units are
cut from the whole sweep before anything stored is skipped, so a unit is the same
batch whichever backend, worker count or shard computes it, and gives the same
numbers; a resumed run computes exactly the rows still missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from neural_testbed import base
from neural_testbed.agents import registry
from neural_testbed.leaderboard import config_batches
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run.options import RunOptions

__all__ = ["WorkUnit", "accepts_padding", "plan_units"]


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """Configs of one agent (one, or several of one group) on same-shape problems."""

    agent: str
    config: Any
    problems: tuple[base.Problem, ...]
    estimator: str = "auto"
    agent_seed: int = 0
    pad_to: int = 0  # pad the batch to this many problems (0 = its own size)
    train_rows: int = 0  # pad training sets to this many rows, if the agent pads (0: no)
    more_configs: tuple[Any, ...] = ()  # configs of config's group run in the same programs
    # A study (tal, probe) whose records the unit computes instead of rows: anything with
    # ``records(agent, problems, programs) -> list[dict]`` (picklable, for workers).
    study: Any = None

    @property
    def configs(self) -> tuple[Any, ...]:
        return (self.config, *self.more_configs)


def accepts_padding(agent: base.Agent | base.HostAgent) -> bool:
    """Whether problems of every T of a padding group can share ``agent``'s programs: a JAX
    agent says so; a host agent always can (it is handed its own T rows)."""
    return isinstance(agent, base.HostAgent) or getattr(agent, "accepts_padding", False)


def _pads(agent_name: str, config: Any, problem: base.Problem,
          build: base.AgentBuilder | None) -> bool:
    """Whether the agent built for ``problem``'s shapes pads."""
    shapes = base.Shapes.of(problem)
    try:
        agent = build(shapes) if build is not None else registry.get_agent(agent_name).make(
            config, shapes)
    except Exception:  # the unit's own build fails again and records failed rows
        return False
    return accepts_padding(agent)


def plan_units(agent_name: str, configs: Sequence[Any], problems: Sequence[base.Problem],
               store: store_lib.ResultsStore | None, options: RunOptions = RunOptions(),
               build: base.AgentBuilder | None = None) -> tuple[list[WorkUnit], int]:
    """The units still to run, and how many rows ``store`` already holds (None: nothing
    stored yet).

    Chunks of ``options.problems_per_batch`` are cut per shape, or per padding group
    where a batch size is set and the agent pads (several T in one program: fewer,
    larger programs). Configs are batched where they differ only in fields the agent
    declares batchable (``AgentSpec.batchable``). ``build``: ``shapes -> agent`` of
    ``run_agent``, None for the registered agent of each config. Shard ``(i, n)`` keeps the units whose position is ``i - 1``
    modulo ``n``. A batch of configs whose configs are stored for different problems
    is split into one unit per config.
    """
    shard_index, num_shards = options.shard
    train_rows = _train_rows(problems)
    batchable = () if build is not None else registry.get_agent(agent_name).batchable
    across_sizes = options.problems_per_batch is not None and bool(train_rows)
    units, reused, position = [], 0, 0
    for batch_configs in config_batches.batch_configs(configs, options.configs_per_batch,
                                                      batchable):
        stored = [_stored(store, agent_name, config, options) for config in batch_configs]
        def by_padding(problem, config=batch_configs[0]) -> bool:
            return across_sizes and _pads(agent_name, config, problem, build)

        for group in _unit_groups(problems, by_padding):
            size = options.problems_per_batch or len(group)
            for start in range(0, len(group), size):
                batch, position = group[start:start + size], position + 1
                if (position - 1) % num_shards != shard_index - 1:
                    continue
                todo = [tuple(p for p in batch if not _done(p, done)) for done in stored]
                reused += sum(len(p.taus) for p in batch) * len(todo) - sum(
                    len(p.taus) for needed in todo for p in needed)
                together = [(batch_configs, todo[0])] if len(set(todo)) == 1 else [
                    ((config,), needed) for config, needed in zip(batch_configs, todo)]
                units += [WorkUnit(agent_name, cs[0], needed, options.estimator,
                                   options.agent_seed, pad_to=size,
                                   train_rows=train_rows.get(batch[0].problem_id, 0),
                                   more_configs=cs[1:])
                          for cs, needed in together if needed]
    return units, reused


def _stored(store, agent_name: str, config: Any, options: RunOptions) -> set:
    """The row keys of ``config`` that count as done."""
    if options.recompute or store is None:
        return set()
    done = store.done(agent_name, config, options.estimator, options.agent_seed)
    if options.retry_failed:
        done -= store.done(agent_name, config, options.estimator, options.agent_seed,
                           status="failed")
    return done


def _done(problem: base.Problem, stored: set) -> bool:
    return all((problem.problem_id, base.definition_hash(problem), tau, problem.num_test,
                problem.num_samples) in stored for tau in problem.taus)


def _unit_groups(problems: Sequence[base.Problem],
                 by_padding: Callable[[base.Problem], bool]) -> list[list[base.Problem]]:
    """The problems units are cut from together: one shape's, or, where ``by_padding`` of
    a padding group's first problem, the padding group's, its shapes in order of first
    appearance."""
    groups: dict[Hashable, list[base.Problem]] = {}
    padding: dict[Hashable, bool] = {}  # padding group -> whether the agent pads on it
    for p in problems:
        group = getattr(p, "padding_group", None)
        if group is not None and group not in padding:
            padding[group] = by_padding(p)
        key = ("padding", group) if padding.get(group) else ("shape", p.shape)
        groups.setdefault(key, []).append(p)
    for members in groups.values():  # a padding group's shapes one after another
        order = list(dict.fromkeys(p.shape for p in members))
        members.sort(key=lambda p: order.index(p.shape))
    return list(groups.values())


def _train_rows(problems: Sequence[base.Problem]) -> dict[str, int]:
    """Each paddable problem's padded training rows: its padding group's largest T, taken
    over the whole sweep so that a unit pads the same whichever shard or resumed run
    plans it (an agent that pads uses its first T rows alone either way)."""
    largest: dict[Hashable, int] = {}
    for p in problems:
        group = getattr(p, "padding_group", None)
        if group is not None:
            largest[group] = max(largest.get(group, 0), p.num_train)
    return {p.problem_id: largest[p.padding_group] for p in problems
            if getattr(p, "padding_group", None) is not None}
