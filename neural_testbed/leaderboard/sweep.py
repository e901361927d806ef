"""Running agents over problems: one pipeline for every entry point.

A run is planned as work units (one config on one batch of problems of one
shape, or of one padding group where the agent pads), less what the store
already holds; units run on a backend (see :mod:`executors`) and their rows go
to the store (``run_sweep``) or back to the caller (``run_agent``) as each
finishes, so an interrupted sweep continues where it stopped and nothing is
computed twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from neural_testbed import base, memory
from neural_testbed.agents import registry, validation
from neural_testbed.leaderboard import config_batches, executors, runner
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.likelihood import kl, regression

__all__ = ["MAX_AGENT_SEED", "SweepSummary", "check_agent_on_problems", "check_builder",
           "check_memory", "check_options", "parse_shard", "plan_units", "run_agent",
           "run_sweep", "usable_cores"]

MAX_AGENT_SEED = 2**32 - 1  # the seed is folded into keys as a uint32
MAX_INT32 = 2**31 - 1
# Local worker processes per usable core: a worker also waits (compiling, in Python), so
# two per core can still help; beyond that each adds a JAX runtime's memory and no speed.
MAX_WORKERS_PER_CORE = 2


@dataclasses.dataclass
class SweepSummary:
    """What a sweep did."""

    computed: int = 0  # rows computed and written by this call
    reused: int = 0  # rows found in the store and not recomputed
    failed: int = 0  # rows written with status "failed" by this call


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``1 <= i <= n``, or a clear error."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: need 1 <= i <= n")
    return i, n


def usable_cores() -> int:
    """The cores this process may use: those it is pinned to, and no more than a cgroup v2
    CPU quota allows (a container limited to 2 CPUs still sees every core of its host)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else max(1, min(cores, -(-int(quota) // int(period))))


def check_options(
    *,
    agent_seed: int = 0,
    problems_per_batch: int | None = None,
    workers: int = 1,
    backend: str = "local",
    estimator: str = "auto",
    configs_per_batch: int = 1,
    units_at_once: int = 1,
    address: str | None = None,
) -> None:
    """Checks the settings of a run before anything is opened or computed (an
    ``address`` is also checked to be reachable).

    Raises:
      ValueError: naming the bad setting (and its command-line flag) and what
        is allowed.
    """
    def is_int(value):
        return isinstance(value, int) and not isinstance(value, bool)

    if not is_int(agent_seed) or not 0 <= agent_seed <= MAX_AGENT_SEED:
        raise ValueError(f"agent seed (--seed) must be an integer from 0 to {MAX_AGENT_SEED}, "
                         f"got {agent_seed!r}")
    if problems_per_batch is not None and (
            not is_int(problems_per_batch) or problems_per_batch < 1):
        raise ValueError("problems per batch (--problems-per-batch) must be an integer >= 1, "
                         f"got {problems_per_batch!r}")
    if not is_int(configs_per_batch) or configs_per_batch < 1:
        raise ValueError("configs per batch (--configs-per-batch) must be an integer >= 1, "
                         f"got {configs_per_batch!r}")
    if not is_int(workers) or workers < 1:
        raise ValueError(f"workers (--workers) must be an integer >= 1, got {workers!r}")
    cores = usable_cores()
    if backend == "local" and workers > MAX_WORKERS_PER_CORE * cores:
        raise ValueError(f"workers (--workers) must be at most {MAX_WORKERS_PER_CORE * cores} "
                         f"({MAX_WORKERS_PER_CORE} per core; this process may use {cores}): each "
                         "worker runs its own JAX runtime and compiles its own programs, so more "
                         f"only add memory and switching; got {workers}")
    if backend not in executors.BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(executors.BACKENDS)}")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError("--backend ray needs Ray: pip install 'neural-testbed[ray]'")
    if address is not None:
        if backend != "ray":
            raise ValueError(f"--address {address} names a Ray cluster: it needs --backend "
                             f"ray (the backend is {backend})")
        executors.check_ray_address(address)
    executors.check_units_at_once(units_at_once, backend, workers)
    kl.choose_estimator(1, estimator)


def check_agent_on_problems(agent_name: str, problems: Sequence[base.Problem],
                            estimator: str = "auto", configs: Sequence[Any] = ()) -> None:
    """Checks that a registered agent, and each of ``configs``, can be evaluated on every
    problem (classification or regression) with ``estimator``, before anything is opened
    or computed."""
    spec = registry.get_agent(agent_name)
    targets = sorted({p.target for p in problems})
    for target in targets:
        if target not in spec.targets:
            able = sorted(name for name, s in registry.AGENTS.items() if target in s.targets)
            raise ValueError(f"agent {agent_name!r} is not built for {target} problems (it "
                             f"handles {', '.join(spec.targets)}); agents for {target}: "
                             f"{', '.join(able)}")
        if spec.check_target is not None:
            for config in configs:
                spec.check_target(config, target)
    if "regression" in targets:
        regression.choose_estimator(100, estimator)
    for problem in problems:  # N test samples of tau + 1 inputs are counted in int32
        most = MAX_INT32 // problem.num_test - 1
        if max(problem.taus) > most:
            raise ValueError(f"tau {max(problem.taus)} (--taus) is too large for "
                             f"{problem.problem_id}: its N = {problem.num_test} test samples "
                             f"of tau + 1 inputs each are counted in int32, so tau must be at "
                             f"most {most}")


def check_memory(agent_name: str, configs: Sequence[Any], problems: Sequence[base.Problem],
                 estimator: str = "auto", agent_seed: int = 0) -> None:
    """Refuses, before any work, a config whose programs hold an array larger than this
    machine's memory (``memory.total_bytes``) on one problem alone: ``batch_size=10**9``
    or ``hidden=(10**9,)`` used to fail only after the store was made, as failed rows.

    Each group of configs that share program shapes is traced (not compiled or run) at
    the problem with the most training inputs and the one with the most test inputs:
    the largest array of a program is a lower bound of its memory, so a refusal is
    certain. A program that cannot be traced fails in its unit, with its own error in
    the rows, and is not checked here.
    """
    spec = registry.get_agent(agent_name)
    total, what = memory.total_bytes()
    train_size = lambda p: p.num_train * p.input_dim
    test_size = lambda p: p.num_test * max(p.taus) * p.input_dim
    # Ties go to the other size, so that where one problem is the largest of both (every
    # built-in sweep: one N and one set of taus) it is traced once, not twice.
    largest_train = max(problems, key=lambda p: (train_size(p), test_size(p)))
    largest_test = max(problems, key=lambda p: (test_size(p), train_size(p)))
    for config_batch in config_batches.batch_configs(configs, len(configs) or 1, spec.batchable):
        config = config_batch[0]
        for problem in dict.fromkeys((largest_train, largest_test)):
            try:
                batch_runner = runner.BatchRunner(
                    spec.make(config, base.Shapes.of(problem)), agent_name, config, problem,
                    estimator, agent_seed)
                size, program = batch_runner.largest_array(problem)
            except Exception:  # the unit records the same error in its rows
                continue
            if size > total:
                changed = ", ".join(
                    f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
                    if getattr(config, f.name) != getattr(spec.default, f.name)) or "default"
                raise ValueError(f"agent {agent_name} ({changed}) cannot run "
                                 f"{problem.problem_id}: its {program} program holds an array "
                                 f"of {size / 2**30:.4g} GiB for that problem alone, more than "
                                 f"the {total / 2**30:.4g} GiB of {what} here; use smaller "
                                 "sizes (batch_size, widths, --taus)")


def plan_units(
    agent_name: str,
    configs: Sequence[Any],
    problems: Sequence[base.Problem],
    store: store_lib.ResultsStore | None,
    *,
    agent_seed: int = 0,
    estimator: str = "auto",
    problems_per_batch: int | None = None,
    configs_per_batch: int = 1,
    recompute: bool = False,
    retry_failed: bool = False,
    shard: tuple[int, int] = (1, 1),
    build: base.AgentBuilder | None = None,
) -> tuple[list[executors.WorkUnit], int]:
    """The work units still to run, and how many rows the store already holds.

    Units are cut from the whole sweep (per batch of configs that differ only in the
    fields the agent declares batchable, per problem shape, chunks of
    ``problems_per_batch``) before anything is skipped, so a unit is the
    same batch whichever backend, worker count or shard runs it, and gives the same
    numbers. With ``problems_per_batch`` set and an agent that accepts padding, the
    chunks are cut from each padding group instead (its shapes one after another), so
    that a batch larger than one T's problems trains several T in one program (fewer,
    larger programs: what a GPU wants). Shard ``(i, n)`` keeps the units whose position
    is ``i - 1`` modulo ``n``. Problems already stored are then dropped from their unit
    (``store=None``: nothing is stored yet); a batch of configs whose configs are stored
    for different problems (some run alone earlier) is split into one unit per config.
    ``build``: ``shapes -> agent`` of ``run_agent``; None builds each config's agent from
    the registry where whether it pads matters.
    """
    check_options(agent_seed=agent_seed, problems_per_batch=problems_per_batch,
                  estimator=estimator, configs_per_batch=configs_per_batch)
    for config in configs:  # user agents' configs obey the same field rules as built-ins
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            validation.check_fields(config)
    shard_index, num_shards = shard
    train_rows = _train_rows(problems)
    across_sizes = problems_per_batch is not None and bool(train_rows)

    def pads(config, problem) -> bool:
        shapes = base.Shapes.of(problem)
        try:
            agent = build(shapes) if build is not None else registry.get_agent(
                agent_name).make(config, shapes)
        except Exception:  # the unit's own build fails again and records failed rows
            return False
        return runner.accepts_padding(agent)

    batchable = () if build is not None else registry.get_agent(agent_name).batchable
    units, reused, position = [], 0, 0
    for config_batch in config_batches.batch_configs(configs, configs_per_batch, batchable):
        groups = _unit_groups(problems, lambda p: across_sizes and pads(config_batch[0], p))
        done = []
        for config in config_batch:
            stored = set() if recompute or store is None else store.done(
                agent_name, config, estimator, agent_seed)
            if retry_failed and store is not None:
                stored -= store.done(agent_name, config, estimator, agent_seed, status="failed")
            done.append(stored)
        for group in groups:
            size = problems_per_batch or len(group)
            for start in range(0, len(group), size):
                batch, position = group[start:start + size], position + 1
                if (position - 1) % num_shards != shard_index - 1:
                    continue
                todo = []  # per config, the problems it still needs
                for stored in done:
                    todo.append(tuple(p for p in batch if not all(
                        (p.problem_id, base.definition_hash(p), tau, p.num_test,
                         p.num_samples) in stored for tau in p.taus)))
                    reused += sum(len(p.taus) for p in batch) - sum(
                        len(p.taus) for p in todo[-1])
                together = [(config_batch, todo[0])] if len(set(todo)) == 1 else [
                    ((config,), needed) for config, needed in zip(config_batch, todo)]
                for batch_configs, needed in together:
                    if needed:
                        units.append(executors.WorkUnit(
                            agent_name, batch_configs[0], needed, estimator, agent_seed,
                            pad_to=size, train_rows=train_rows.get(batch[0].problem_id, 0),
                            more_configs=batch_configs[1:]))
    return units, reused


def _unit_groups(problems: Sequence[base.Problem],
                 by_padding: Callable[[base.Problem], bool]) -> list[list[base.Problem]]:
    """The problems that units are cut from together: those of one shape, or, where
    ``by_padding`` of a padding group's first problem, those of the padding group, its
    shapes in order of first appearance (so chunks of one shape's size are the units cut
    per shape)."""
    shapes: dict[Any, list[base.Problem]] = {}
    for p in problems:
        shapes.setdefault(p.shape, []).append(p)
    groups: dict[Any, list[base.Problem]] = {}
    padding: dict[Any, bool] = {}  # padding group -> whether the agent pads on it
    for shape, group in shapes.items():
        padding_group = getattr(group[0], "padding_group", None)
        if padding_group is not None and padding_group not in padding:
            padding[padding_group] = by_padding(group[0])
        key = ("padding", padding_group) if padding.get(padding_group) else ("shape", shape)
        groups.setdefault(key, []).extend(group)
    return list(groups.values())


def _train_rows(problems: Sequence[base.Problem]) -> dict[str, int]:
    """Each paddable problem's padded training rows: the largest T of its padding group.

    Taken over the whole sweep before anything is skipped, so a unit pads the same
    whichever shard, store or resumed run plans it (the numbers do not depend on the
    padding either way: an agent that accepts it uses the first T rows alone).
    """
    largest: dict[Any, int] = {}
    for p in problems:
        group = getattr(p, "padding_group", None)
        if group is not None:
            largest[group] = max(largest.get(group, 0), p.num_train)
    return {p.problem_id: largest[p.padding_group] for p in problems
            if getattr(p, "padding_group", None) is not None}


def check_builder(build: Any) -> None:
    """Refuses, in one line, an agent where a function ``shapes -> agent`` is expected."""
    if isinstance(build, (base.Agent, base.HostAgent)) or not callable(build):
        raise TypeError(f"expected a function shapes -> agent (e.g. functools.partial(make, "
                        f"config)), got {type(build).__name__}: an agent is built for one "
                        f"problem shape (base.Shapes), so it is built per shape of the problems")


def _progress(units, total: int, desc: str, show: bool) -> Iterator:
    """Yields ``(unit, rows)`` from ``units`` with a progress bar and ETA on stderr."""
    bar = tqdm(total=total, unit="problem", disable=not show or total == 0, file=sys.stderr,
               desc=desc, dynamic_ncols=True)
    with bar:
        for unit, rows in units:
            yield unit, rows
            bar.update(len(unit.problems) * len(unit.configs))


def run_agent(
    build: base.AgentBuilder,
    problems: Sequence[base.Problem],
    agent_name: str = "agent",
    *,
    config: Any = None,
    agent_seed: int = 0,
    problems_per_batch: int | None = None,
    estimator: kl.Estimator = "auto",
    progress: bool = True,
    on_rows: Callable[[list[base.ProblemResult]], None] | None = None,
    units_at_once: int = 1,
) -> list[base.ProblemResult]:
    """Trains an agent once per problem and evaluates it at each of the problem's taus.

    The same planner and executor as :func:`run_sweep`, in this process,
    without a store: for an agent that need not be registered.

    Args:
      build: ``shapes -> agent``, called once per problem shape (e.g.
        ``functools.partial(make, config)`` of a ``make(config, shapes)``).
      problems: the problems, e.g. ``get_sweep("quick").values()``.
      agent_name: recorded in each row.
      config: the agent's config, recorded (hashed) in each row; None if it has none.
      agent_seed: folded into each problem's agent key.
      problems_per_batch: problems trained together; ``None`` = all those of one shape
        (one T; a smaller batch shows progress more often and uses less memory while
        training, a larger one trains several T together if the agent pads).
      estimator: ``"auto"``, ``"monte_carlo"`` or ``"partition"``.
      progress: show a progress bar on stderr.
      on_rows: called with the rows of each batch as soon as they are
        computed (e.g. to write them to a results store).
      units_at_once: batches computed at the same time (threads of this process:
        ``executors.default_units_at_once()`` is what the command uses on a CPU).

    Returns:
      One row per (problem, tau), failed problems included (``status="failed"``).

    Example:
      >>> from neural_testbed import agents, leaderboard
      >>> spec = agents.get_agent("mlp")
      >>> rows = leaderboard.run_agent(functools.partial(spec.make, spec.default),
      ...                              leaderboard.get_sweep("quick").values(), "mlp")
    """
    check_builder(build)
    problems = list(problems)
    units, _ = plan_units(agent_name, [config], problems, None, agent_seed=agent_seed,
                          estimator=estimator, problems_per_batch=problems_per_batch, build=build)
    results: list[base.ProblemResult] = []
    total = sum(len(u.problems) * len(u.configs) for u in units)
    executed = executors.execute(units, build=build, units_at_once=units_at_once)
    for _, rows in _progress(executed, total, agent_name, progress):
        if on_rows is not None:
            on_rows(rows)
        results.extend(rows)
    order = {p.problem_id: i for i, p in enumerate(problems)}
    return sorted(results, key=lambda r: (order[r.problem_id], r.tau))


def run_sweep(
    agent_name: str,
    configs: Sequence[Any],
    problems: Sequence[base.Problem],
    store: store_lib.ResultsStore,
    *,
    agent_seed: int = 0,
    estimator: str = "auto",
    problems_per_batch: int | None = None,
    configs_per_batch: int = 8,
    recompute: bool = False,
    retry_failed: bool = False,
    shard: tuple[int, int] = (1, 1),
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    imports: Sequence[str] = (),
    progress: bool = True,
    units_at_once: int = 1,
) -> SweepSummary:
    """Runs each config of a registered agent on each problem, into ``store``.

    Args:
      agent_name: a registered agent.
      configs: configs of that agent (its sweep, or one config).
      problems: the problems.
      store: where rows are written as units finish; rows already there are
        skipped.
      agent_seed: folded into every problem's agent key.
      estimator: the likelihood estimator setting.
      problems_per_batch: problems per work unit (None = all those of one shape; more
        than that trains several T in one unit where the agent pads: ``plan_units``).
      configs_per_batch: up to this many configs that differ only in the fields the agent
        declares batchable are trained and evaluated in one program (vmap over configs,
        ``config_batches``):
        one compilation per group of configs, not per config; more uses more memory.
      recompute: recompute and replace rows already in the store.
      retry_failed: recompute the rows stored as failed (and missing ones).
      shard: ``(i, n)``: run only the i-th of n deterministic shares of the units.
      backend: ``"local"`` or ``"ray"``.
      workers: local worker processes, or CPUs of a local Ray cluster.
      address: address of an existing Ray cluster.
      imports: modules that register user agents, for worker processes.
      progress: show a progress bar with an ETA on stderr.
      units_at_once: work units computed at the same time in this process (backend
        "local", one worker); the command's default is
        ``executors.default_units_at_once()``. More uses more memory.

    Returns:
      Counts of computed, reused and failed rows.
    """
    check_options(agent_seed=agent_seed, problems_per_batch=problems_per_batch, workers=workers,
                  backend=backend, estimator=estimator, configs_per_batch=configs_per_batch,
                  units_at_once=units_at_once, address=address)
    check_agent_on_problems(agent_name, problems, estimator, configs)
    units, reused = plan_units(
        agent_name, configs, list(problems), store, agent_seed=agent_seed, estimator=estimator,
        problems_per_batch=problems_per_batch, configs_per_batch=configs_per_batch,
        recompute=recompute, retry_failed=retry_failed,
        shard=shard)
    summary = SweepSummary(reused=reused)
    total = sum(len(u.problems) * len(u.configs) for u in units)
    executed = executors.execute(units, backend, workers, address, imports,
                                 units_at_once=units_at_once)
    # Closed on the way out, whatever ends the loop: a Ctrl-C while this thread writes rows
    # would otherwise leave the workers computing (the generator, kept alive by the
    # traceback, stops them only when closed) and the exit waiting for them.
    with contextlib.closing(executed):
        for _, rows in _progress(executed, total, agent_name, progress):
            store.write(rows)
            summary.computed += len(rows)
            summary.failed += sum(r.status != "ok" for r in rows)
    return summary
