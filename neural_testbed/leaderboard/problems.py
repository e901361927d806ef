"""Problem sweeps with stable ids, and the keys and data of each problem.

A problem is (temperature, T, seed) of the random-MLP environment, evaluated
at each tau of ``taus``. Its environment, training data, test data and the
agent's key all derive from its seed by explicit splitting, so the same
problem gives the same numbers on every machine and in every sweep.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
from collections.abc import Mapping
from typing import NamedTuple

import jax

from neural_testbed import base, generative

__all__ = [
    "SWEEPS",
    "Problem",
    "ProblemKeys",
    "get_sweep",
    "load_problem",
    "prior_knowledge",
    "problem_keys",
]


@dataclasses.dataclass(frozen=True)
class Problem:
    """One testbed problem and its evaluation settings."""

    problem_id: str  # stable id, e.g. "classification_2d/17"
    temperature: float  # > 0; 0.01, 0.1, 0.5 = high, medium, low SNR
    num_train: int  # T, number of training pairs
    seed: int  # environment seed: the same seed gives the same environment
    input_dim: int = 2  # d
    num_classes: int = 2  # K
    env_hidden: tuple[int, ...] = (50, 50)  # environment MLP hidden widths
    taus: tuple[int, ...] = (1, 100)  # joint sizes it is evaluated at
    num_test: int = 1000  # N, test tau-samples per tau
    num_samples: int = 1000  # M, samples drawn from the agent's belief

    def __post_init__(self):
        generative.check_temperature(self.temperature)
        for name in ("num_train", "input_dim", "num_test", "num_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                label = "num_train (T)" if name == "num_train" else name
                raise ValueError(f"{self.problem_id}: {label} must be an integer >= 1, got {value!r}")
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ValueError(f"{self.problem_id}: every tau must be an integer >= 1, got {self.taus!r}")

    @property
    def shape(self) -> tuple:
        """Problems with the same shape train and evaluate with one compilation."""
        return (self.input_dim, self.num_classes, self.num_train, self.env_hidden,
                self.taus, self.num_test, self.num_samples)


class ProblemKeys(NamedTuple):
    environment: jax.Array
    train_data: jax.Array
    test: jax.Array  # fold in tau for each evaluation
    agent: jax.Array  # fold in the agent seed


def problem_keys(seed: int | jax.Array) -> ProblemKeys:
    """Splits a problem's seed into the keys of its random draws."""
    return ProblemKeys(*jax.random.split(jax.random.key(seed), 4))


def prior_knowledge(problem: Problem) -> base.PriorKnowledge:
    """What the agent is told about ``problem``."""
    return base.PriorKnowledge(
        input_dim=problem.input_dim,
        num_classes=problem.num_classes,
        num_train=problem.num_train,
        env_hidden=problem.env_hidden,
        temperature=problem.temperature,
    )


def load_problem(problem: Problem) -> tuple[generative.Environment, base.Data]:
    """The problem's environment and its T training pairs.

    Example:
      >>> problem = get_sweep("paper")["classification_2d/17"]
      >>> env, data = load_problem(problem)
    """
    keys = problem_keys(problem.seed)
    env = generative.sample_environment(
        keys.environment, problem.temperature, problem.input_dim,
        problem.num_classes, problem.env_hidden,
    )
    return env, generative.sample_train_data(keys.train_data, env, problem.num_train)


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
