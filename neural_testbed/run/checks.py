"""What a run checks before any store is opened or anything computed: that the agent
can be evaluated on every problem, and that no program needs more memory than there is.

Each raises a one-line ``ValueError`` naming the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from neural_testbed import base, memory
from neural_testbed.agents import registry
from neural_testbed.leaderboard import config_batches
from neural_testbed.likelihood import regression
from neural_testbed.run import programs

__all__ = ["check_agent_on_problems", "check_memory"]

MAX_INT32 = 2**31 - 1


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


def largest_array(runner: programs.UnitRunner, problem: base.Problem) -> tuple[int, str]:
    """Bytes of the largest array in ``runner``'s programs for ``problem`` alone, and which
    program holds it: traced, not compiled or run."""
    key_seeds, args, num_train = runner.arguments([problem])
    with jax.default_matmul_precision(programs.MATMUL_PRECISION):
        build = jax.jit(programs.build_program(runner.template)).trace(key_seeds, args)
        instances, agent_keys, test_keys = build.out_info
        sizes = {"build": _largest_value(build.jaxpr.jaxpr)}
        if runner.on_host:
            states = jax.ShapeDtypeStruct((1,), np.int32)  # a host agent's handles
        else:
            train = jax.jit(runner.train).trace(agent_keys, instances, num_train,
                                                *runner.values)
            sizes["training"], states = _largest_value(train.jaxpr.jaxpr), train.out_info
        for tau, estimator in runner.evaluations:
            evaluate = jax.jit(lambda *a, tau=tau, estimator=estimator: runner.evaluate(
                *a, tau=tau, tau_estimator=estimator)).trace(
                test_keys, states, instances.env, *runner.values)
            sizes[f"tau = {tau} evaluation"] = _largest_value(evaluate.jaxpr.jaxpr)
    name = max(sizes, key=sizes.get)
    return sizes[name], name


def check_memory(agent_name: str, configs: Sequence[Any], problems: Sequence[base.Problem],
                 estimator: str = "auto", agent_seed: int = 0) -> None:
    """Refuses a config whose programs hold an array larger than this machine's memory
    (``memory.total_bytes``) on one problem alone (``batch_size=10**9`` used to fail only
    after the store was made, as failed rows).

    Each group of configs that share program shapes is traced at the problem with the
    most training inputs and the one with the most test inputs (one problem where it is
    both). A program that cannot be traced fails in its unit, with its own error in the
    rows, and is not checked here.
    """
    spec = registry.get_agent(agent_name)
    total, what = memory.total_bytes()
    train_size = lambda p: p.num_train * p.input_dim
    test_size = lambda p: p.num_test * max(p.taus) * p.input_dim
    largest_train = max(problems, key=lambda p: (train_size(p), test_size(p)))
    largest_test = max(problems, key=lambda p: (test_size(p), train_size(p)))
    for config_batch in config_batches.batch_configs(configs, len(configs) or 1,
                                                     spec.batchable):
        config = config_batch[0]
        for problem in dict.fromkeys((largest_train, largest_test)):
            try:
                runner = programs.UnitRunner(spec.make(config, base.Shapes.of(problem)),
                                             agent_name, (config,), problem, estimator,
                                             agent_seed)
                size, program = largest_array(runner, problem)
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
