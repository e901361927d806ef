"""Problem sweeps and running agents over them."""

from neural_testbed.leaderboard.problems import (
    SWEEPS,
    Problem,
    get_sweep,
    load_problem,
    prior_knowledge,
    problem_keys,
)
from neural_testbed.leaderboard.runner import run_agent

__all__ = [
    "SWEEPS",
    "Problem",
    "get_sweep",
    "load_problem",
    "prior_knowledge",
    "problem_keys",
    "run_agent",
]
