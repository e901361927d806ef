"""What a run checks before any store is opened or anything computed: that the agent
can be evaluated on every problem, and that no program needs more memory than there is.

Each raises a one-line ``ValueError`` naming the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from neural_testbed import base, memory
from neural_testbed.agents import registry
from neural_testbed.likelihood import regression
from neural_testbed.run import programs
from neural_testbed.run.plan import WorkUnit

__all__ = ["check_agent_on_problems", "check_exact_environment", "check_memory",
           "largest_array", "largest_arrays"]

MAX_INT32 = 2**31 - 1
# Agents that are the exact posterior of the problem's known environment (told its true
# kernel): there is none where the likelihood is not known (real data).
NEEDS_EXACT_ENVIRONMENT = ("oracle_gp",)


def check_exact_environment(agent_name: str, problems: Sequence[base.Problem]) -> None:
    """Refuses an agent of :data:`NEEDS_EXACT_ENVIRONMENT` on a problem without a known
    environment (``metric != "kl"``: real data), in one line."""
    if agent_name not in NEEDS_EXACT_ENVIRONMENT:
        return
    real = next((p for p in problems if p.metric != "kl"), None)
    if real is not None:
        raise ValueError(f"agent {agent_name!r} is the exact posterior of a known Gaussian "
                         f"process; {real.problem_id} is real data, which has none (the gp "
                         "agent fits its kernel to the data)")


def check_agent_on_problems(agent_name: str, problems: Sequence[base.Problem],
                            estimator: str = "auto", configs: Sequence[Any] = ()) -> None:
    """A registered agent, and each of ``configs``, can be evaluated on every problem
    (classification or regression) with ``estimator``."""
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
    check_exact_environment(agent_name, problems)
    if "regression" in targets:
        regression.choose_estimator(100, estimator)
    for problem in problems:  # N test samples of tau + 1 inputs are counted in int32
        most = MAX_INT32 // problem.num_test - 1
        if max(problem.taus) > most:
            raise ValueError(f"tau {max(problem.taus)} (--taus) is too large for "
                             f"{problem.problem_id}: its N = {problem.num_test} test samples "
                             f"of tau + 1 inputs each are counted in int32, so tau must be at "
                             f"most {most}")


def _largest_value(jaxpr) -> int:
    """Bytes of the largest value a jaxpr takes or makes: a lower bound of its memory."""
    values = [*jaxpr.invars, *(v for eqn in programs.equations(jaxpr) for v in eqn.outvars)]
    return max((math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in values
                if hasattr(v.aval, "shape") and hasattr(v.aval, "dtype")), default=0)


def largest_arrays(runner: programs.UnitRunner, run_programs: programs.Programs,
                   batch: Sequence[base.Problem]) -> dict[str, int]:
    """Bytes of the largest array in each of ``runner``'s programs for ``batch``: traced,
    not compiled or run, the traces kept in ``run_programs`` for the run to compile."""
    key_seeds, args, num_train = runner.arguments(batch)
    size = len(batch)
    build = run_programs.trace(runner.key("build", size), programs.build_program(runner.template),
                               (key_seeds, args))
    instances, agent_keys, test_keys = build.out_info
    sizes = {"build": _largest_value(build.jaxpr.jaxpr)}
    if runner.on_host:  # trained outside JAX: a handle per problem into its states
        states = jax.ShapeDtypeStruct((size,), np.int32)
    else:
        train = run_programs.trace(runner.key("train", size), runner.train,
                                   (agent_keys, instances, num_train, *runner.values))
        sizes["training"], states = _largest_value(train.jaxpr.jaxpr), train.out_info
    for tau, estimator in runner.evaluations:
        evaluate = run_programs.trace(runner.key("evaluate", size, tau, estimator),
                                      runner.evaluation(tau, estimator),
                                      (test_keys, states, instances.env, *runner.values))
        sizes[f"tau = {tau} evaluation"] = _largest_value(evaluate.jaxpr.jaxpr)
    return sizes


def largest_array(runner: programs.UnitRunner, problem: base.Problem) -> tuple[int, str]:
    """Bytes of the largest array in ``runner``'s programs for ``problem`` alone, and which
    program holds it."""
    sizes = largest_arrays(runner, programs.Programs(), [problem])
    name = max(sizes, key=sizes.get)
    return sizes[name], name


def check_memory(units: Sequence[WorkUnit], run_programs: programs.Programs,
                 progress: bool = False) -> None:
    """Refuses a config whose programs hold an array larger than this machine's memory
    (``memory.total_bytes``) for a unit's batch of problems (``batch_size=10**9`` used
    to fail only after the store was made, as failed rows).

    The first unit of each set that shares programs is traced at its batch, into
    ``run_programs``, where the run finds the traces and does not trace them again. A
    program that cannot be traced fails in its unit, with its own error in the rows,
    and is not checked here.

    ``progress``: a bar on stderr while it traces, which a grid of hundreds of program
    sets spends minutes on before the run's own bar starts.
    """
    total, what = memory.total_bytes()
    seen = set()
    units = [u for u in units if u.study is None]
    for unit in tqdm(units, desc="checking memory", unit="unit", postfix="tracing",
                     disable=not progress or not units, file=sys.stderr, leave=False,
                     dynamic_ncols=True):
        try:
            runner, batch = programs.unit_runner(unit, run_programs), programs.padded_problems(unit)
            if (id(runner), len(batch)) in seen:
                continue
            seen.add((id(runner), len(batch)))
            sizes = largest_arrays(runner, run_programs, batch)
        except Exception:  # the unit records the same error in its rows
            continue
        program = max(sizes, key=sizes.get)
        if sizes[program] > total:
            default = registry.get_agent(unit.agent).default
            config = unit.config
            changed = ", ".join(
                f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
                if getattr(config, f.name) != getattr(default, f.name)) or "default"
            ids = ", ".join(p.problem_id for p in unit.problems)
            size = len(batch)
            batch_of = f"a batch of {size} problems" if size > 1 else "that problem alone"
            raise ValueError(f"agent {unit.agent} ({changed}) cannot run {ids}: its {program} "
                             f"program holds an array of {sizes[program] / 2**30:.4g} GiB for "
                             f"{batch_of}, more than "
                             f"the {total / 2**30:.4g} GiB of {what} here; use smaller "
                             "sizes (batch_size, widths, --taus)"
                             + (" or --problems-per-batch 1" if size > 1 else ""))
