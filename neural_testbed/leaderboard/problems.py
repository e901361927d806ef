"""Problem sweeps with stable ids.

A sweep maps problem ids to problems (see the problem protocol in
:mod:`neural_testbed.base`). Every problem draws its environment, training
data, test data and the agent's key from its own seed, so the same problem
gives the same numbers on every machine and in every sweep, and no two
problems share a draw.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Mapping

import jax

from neural_testbed import base
from neural_testbed.generative import mlp_classification

__all__ = [
    "SWEEPS",
    "Problem",
    "get_sweep",
    "load_problem",
    "prior_knowledge",
]

Problem = mlp_classification.MLPClassificationProblem


def load_problem(problem: base.Problem) -> tuple[object, base.Data]:
    """The problem's environment and its T training pairs.

    Example:
      >>> problem = get_sweep("paper")["classification_2d/17"]
      >>> env, data = load_problem(problem)
    """
    instance = problem.instance()
    return instance.env, instance.data


def prior_knowledge(problem: base.Problem) -> base.PriorKnowledge:
    """What the agent is told about ``problem`` (with a Python float temperature)."""
    prior = problem.instance().prior
    return prior.replace(temperature=float(jax.device_get(prior.temperature)))


_PAPER_TEMPERATURES = (0.01, 0.1, 0.5)
_PAPER_NUM_TRAIN = (1, 3, 10, 30, 100, 300, 1000)
_PAPER_SEEDS = tuple(range(10))


def _paper_sweep() -> dict[str, Problem]:
    """The paper's 2-d sweep: 3 temperatures x 7 T x 10 seeds = 210 problems."""
    grid = itertools.product(_PAPER_TEMPERATURES, _PAPER_NUM_TRAIN, _PAPER_SEEDS)
    problems = {}
    for i, (temperature, num_train, seed) in enumerate(grid):
        problem_id = f"classification_2d/{i}"
        problems[problem_id] = Problem(problem_id, temperature, num_train, seed)
    return problems


def _quick_sweep(paper: Mapping[str, Problem]) -> dict[str, Problem]:
    """A subset of ``paper`` (same ids, same numbers): every temperature,
    T in {10, 100, 1000}, seeds {0, 1}: 18 problems."""
    return {
        pid: p for pid, p in paper.items() if p.num_train in (10, 100, 1000) and p.seed < 2
    }


def _smoke_sweep(paper: Mapping[str, Problem]) -> dict[str, Problem]:
    """The smallest useful subset of ``paper`` for checks and tests: temperature 0.1,
    T in {10, 100}, seeds {0, 1}: 4 problems."""
    return {
        pid: p for pid, p in paper.items()
        if p.temperature == 0.1 and p.num_train in (10, 100) and p.seed < 2
    }


_PAPER = _paper_sweep()
SWEEPS: Mapping[str, Mapping[str, Problem]] = types.MappingProxyType({
    "quick": types.MappingProxyType(_quick_sweep(_PAPER)),
    "paper": types.MappingProxyType(_PAPER),
    "smoke": types.MappingProxyType(_smoke_sweep(_PAPER)),
})


def get_sweep(name: str) -> Mapping[str, Problem]:
    """The problems of sweep ``name``, keyed by problem id."""
    try:
        return SWEEPS[name]
    except KeyError:
        raise ValueError(f"unknown sweep {name!r}; allowed: {', '.join(SWEEPS)}") from None
